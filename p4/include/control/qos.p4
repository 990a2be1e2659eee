/* Ingress QoS classification: DSCP -> traffic class (egress queue). */
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
    }

    /*
     * FabricIngress.qos_classify: exact match on the IPv4 DSCP, sets the traffic class the
     * frame is queued in. Written by the agent from the fabric's QoS policy (DSCP 26 -> TC 3,
     * DSCP 48 -> TC 6); a miss is best effort (TC 0).
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
