/* Packet I/O with the controller: packet-out in ingress, packet-in in egress. */
#ifndef __PACKETIO__
#define __PACKETIO__

#include "../define.p4"
#include "../header.p4"

// A packet-out leaves the port the controller asked for as is: no table sees it.
control PacketIoIngress(inout parsed_headers_t hdr,
                        inout fabric_metadata_t fabric_md,
                        inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = hdr.packet_out.egress_port;
        hdr.packet_out.setInvalid();
        fabric_md.skip_forwarding = true;
    }
}

// A frame for the CPU port carries its ingress port in a packet-in header.
control PacketIoEgress(inout parsed_headers_t hdr,
                       inout fabric_metadata_t fabric_md,
                       inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in._pad = 0;
        }
    }
}

#endif  // __PACKETIO__
