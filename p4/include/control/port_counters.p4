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

// Applied last in ingress: pipeline drops, counted on the ingress port. (Traffic-manager
// drops are counted on the egress port by targets that have one: softswitch.)
control DropCounter(inout parsed_headers_t hdr,
                    inout fabric_metadata_t fabric_md,
                    inout standard_metadata_t standard_metadata) {
    @name(".FabricIngress.drop_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets_and_bytes) drop_counter;

    apply {
        if (standard_metadata.egress_spec == DROP_PORT) {
            drop_counter.count((bit<32>)standard_metadata.ingress_port);
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
