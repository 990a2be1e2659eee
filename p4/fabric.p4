/*
 * railfabric fabric.p4: the pipeline of a rail-optimized GPU training fabric switch
 * (v1model; bmv2 and softswitch). This file only wires controls together: headers,
 * constants and sizes live in include/, each control in include/control/.
 *
 * Control-plane names (the P4Info) are a contract with agent/ and softswitch/: see
 * p4/README.md and fabric.p4info.txt. They are fixed with absolute @name annotations, so
 * moving a table between files does not change its name.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/define.p4"
#include "include/size.p4"
#include "include/header.p4"
#include "include/action.p4"
#include "include/parser.p4"
#include "include/control/packetio.p4"
#include "include/control/port_counters.p4"
#include "include/control/acl.p4"
#include "include/control/qos.p4"
#include "include/control/routing.p4"
#include "include/control/hash.p4"
#include "include/control/next.p4"
#include "include/control/traffic_matrix.p4"
#include "include/control/roce.p4"
#include "include/control/ecn.p4"
#include "include/control/pfc.p4"
#include "include/control/queue_depth.p4"

control FabricIngress(inout parsed_headers_t hdr,
                      inout fabric_metadata_t fabric_md,
                      inout standard_metadata_t standard_metadata) {
    PortCountersIngress() port_counters;
    PacketIoIngress() packet_io;
    Acl() acl;
    QosClassify() qos;
    Routing() routing;
    HashConfig() ecmp_hash;
    Next() next;
    TrafficMatrix() traffic_matrix;
    RoceSignals() roce;
    DropCounter() drop_counter;

    apply {
        port_counters.apply(hdr, fabric_md, standard_metadata);
        if (hdr.packet_out.isValid()) {
            packet_io.apply(hdr, fabric_md, standard_metadata);
        } else if (standard_metadata.parser_error != error.NoError) {
            // A truncated or invalid header: v1model does not drop it by itself.
            mark_to_drop(standard_metadata);
            fabric_md.drop_reason = DROP_REASON_MALFORMED;
        } else {
            acl.apply(hdr, fabric_md, standard_metadata);
            if (!fabric_md.skip_forwarding) {
                if (hdr.ipv4.isValid()) {
                    qos.apply(hdr, fabric_md, standard_metadata);
                    roce.apply(hdr, fabric_md, standard_metadata);
                    traffic_matrix.apply(hdr, fabric_md, standard_metadata);
                    routing.apply(hdr, fabric_md, standard_metadata);
                    if (fabric_md.next_id_valid) {
                        ecmp_hash.apply(hdr, fabric_md, standard_metadata);
                        next.apply(hdr, fabric_md, standard_metadata);
                    }
                } else {
                    // No L2 bridging in a routed fabric: what is neither punted nor IPv4 drops.
                    mark_to_drop(standard_metadata);
                    fabric_md.drop_reason = DROP_REASON_NOT_IPV4;
                }
            }
        }
        drop_counter.apply(hdr, fabric_md, standard_metadata);
    }
}

control FabricEgress(inout parsed_headers_t hdr,
                     inout fabric_metadata_t fabric_md,
                     inout standard_metadata_t standard_metadata) {
    PacketIoEgress() packet_io;
    EcnMarking() ecn;
    Pfc() pfc;
    PortCountersEgress() port_counters;
    QueueDepth() queue_stats;

    apply {
        if (standard_metadata.egress_port != CPU_PORT) {
            ecn.apply(hdr, fabric_md, standard_metadata);
        }
        pfc.apply(hdr, fabric_md, standard_metadata);
        packet_io.apply(hdr, fabric_md, standard_metadata);
        port_counters.apply(hdr, fabric_md, standard_metadata);
        queue_stats.apply(hdr, fabric_md, standard_metadata);
    }
}

V1Switch(FabricParser(),
         FabricVerifyChecksum(),
         FabricIngress(),
         FabricEgress(),
         FabricComputeChecksum(),
         FabricDeparser()) main;
