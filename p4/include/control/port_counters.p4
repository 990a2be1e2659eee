/* Per-port packet and byte counters, indexed by port number. */
#ifndef __PORT_COUNTERS__
#define __PORT_COUNTERS__

#include "../define.p4"
#include "../header.p4"

// Applied first in ingress: every frame received on a port.
control PortCountersIngress(inout parsed_headers_t hdr,
                            inout fabric_metadata_t fabric_md,
                            inout standard_metadata_t standard_metadata) {
    @name(".FabricIngress.ingress_port_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets_and_bytes) ingress_port_counter;

    apply {
        ingress_port_counter.count((bit<32>)standard_metadata.ingress_port);
    }
}

// Applied last in ingress: pipeline drops, counted on the ingress port, in all (drop_counter)
// and by the reason the drop site set (drop_reason_counter, index port * 16 + reason; the
// reasons are railfabric.v1.DropReason, define.p4). Drops outside the pipeline are counted by
// targets that see them, into both counters, on the port where they happen (softswitch: the
// full egress queue and the PFC watchdog on the egress port, a full headroom on the ingress
// port, the host's losses on the port whose socket lost the frame). bmv2 sees none of them.
control DropCounter(inout parsed_headers_t hdr,
                    inout fabric_metadata_t fabric_md,
                    inout standard_metadata_t standard_metadata) {
    @name(".FabricIngress.drop_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets_and_bytes) drop_counter;
    @name(".FabricIngress.drop_reason_counter")
    counter(DROP_REASON_COUNTER_SIZE, CounterType.packets) drop_reason_counter;

    apply {
        if (standard_metadata.egress_spec == DROP_PORT) {
            drop_counter.count((bit<32>)standard_metadata.ingress_port);
            drop_reason_counter.count((bit<32>)standard_metadata.ingress_port
                                      * DROP_REASONS_PER_PORT
                                      + (bit<32>)fabric_md.drop_reason);
        }
    }
}

// Every frame transmitted on a port.
control PortCountersEgress(inout parsed_headers_t hdr,
                           inout fabric_metadata_t fabric_md,
                           inout standard_metadata_t standard_metadata) {
    @name(".FabricEgress.egress_port_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets_and_bytes) egress_port_counter;

    apply {
        egress_port_counter.count((bit<32>)standard_metadata.egress_port);
    }
}

#endif  // __PORT_COUNTERS__
