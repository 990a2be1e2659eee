/*
 * Ingress QoS classification: DSCP -> traffic class (egress queue).
 *
 * The class is also the v1model priority (standard_metadata.priority, bit<3>, as
 * traffic_class_t): bmv2 started with --priority-queues 8 queues a frame in the priority queue
 * of that number (0 lowest, served last), so the lossless (TC 3) and CNP (TC 6) classes get
 * queues of their own, and enq_qdepth is the depth of the frame's own class (docs/bmv2.md).
 */
#ifndef __QOS__
#define __QOS__

#include "../define.p4"
#include "../header.p4"

control QosClassify(inout parsed_headers_t hdr,
                    inout fabric_metadata_t fabric_md,
                    inout standard_metadata_t standard_metadata) {

    @name(".FabricIngress.set_traffic_class")
    action set_traffic_class(traffic_class_t tc) {
        fabric_md.traffic_class = tc;
        standard_metadata.priority = (bit<3>) fabric_md.traffic_class;
    }

    /*
     * FabricIngress.qos_classify: exact match on the IPv4 DSCP, sets the traffic class the
     * frame is queued in. Written by the agent from the fabric's QoS policy (DSCP 26 -> TC 3,
     * DSCP 48 -> TC 6); a miss is best effort (TC 0). Hit or miss, the frame's class and
     * priority are set by set_traffic_class (the default action is that action too).
     */
    @name(".FabricIngress.qos_classify")
    table qos_classify {
        key = {
            hdr.ipv4.dscp : exact @name("dscp");
        }
        actions = {
            set_traffic_class;
        }
        const default_action = set_traffic_class(TC_BEST_EFFORT);
        size = QOS_TABLE_SIZE;
    }

    apply {
        qos_classify.apply();
    }
}

#endif  // __QOS__
