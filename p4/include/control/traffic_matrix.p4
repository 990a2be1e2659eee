/*
 * The traffic matrix at its source: what IPv4 traffic arrives on a ToR's host ports, counted
 * by destination class (one per destination ToR, which the controller numbers), in packets
 * and bytes. The controller assembles ToR x ToR and rail x rail matrices from every ToR's
 * counts (docs/architecture.md §10). Spines and cores have no entries: nothing is counted.
 */
#ifndef __TRAFFIC_MATRIX__
#define __TRAFFIC_MATRIX__

#include "../define.p4"
#include "../header.p4"

control TrafficMatrix(inout parsed_headers_t hdr,
                      inout fabric_metadata_t fabric_md,
                      inout standard_metadata_t standard_metadata) {
    @name(".FabricIngress.matrix_counter")
    counter(MATRIX_COUNTER_SIZE, CounterType.packets_and_bytes) matrix_counter;

    /*
     * FabricIngress.matrix_source: the ports whose arrivals count (a ToR's host ports), one
     * entry each; a miss (an uplink, the CPU port) counts nothing.
     */
    @name(".FabricIngress.matrix_source")
    table matrix_source {
        key = {
            standard_metadata.ingress_port : exact @name("ig_port");
        }
        actions = {
            NoAction;
        }
        const default_action = NoAction();
        size = MATRIX_SOURCE_TABLE_SIZE;
    }

    @name(".FabricIngress.count_matrix")
    action count_matrix(matrix_class_t dst_class) {
        matrix_counter.count((bit<32>)dst_class);
    }

    /*
     * FabricIngress.matrix_dest: longest-prefix match on the IPv4 destination gives its
     * destination class, the index of matrix_counter. A miss counts nothing.
     */
    @name(".FabricIngress.matrix_dest")
    table matrix_dest {
        key = {
            hdr.ipv4.dst_addr : lpm @name("ipv4_dst");
        }
        actions = {
            count_matrix;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = MATRIX_DEST_TABLE_SIZE;
    }

    apply {
        if (matrix_source.apply().hit) {
            matrix_dest.apply();
        }
    }
}

#endif  // __TRAFFIC_MATRIX__
