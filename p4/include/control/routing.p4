/* IPv4 routing: TTL check and longest-prefix match to a next id. */
#ifndef __ROUTING__
#define __ROUTING__

#include "../define.p4"
#include "../header.p4"
#include "../action.p4"

control Routing(inout parsed_headers_t hdr,
                inout fabric_metadata_t fabric_md,
                inout standard_metadata_t standard_metadata) {

    @name(".FabricIngress.set_next_id")
    action set_next_id(next_id_t next_id) {
        fabric_md.next_id = next_id;
        fabric_md.next_id_valid = true;
    }

    /*
     * FabricIngress.routing_v4: longest-prefix match on the IPv4 destination, gives the
     * next id (an ECMP group in FabricIngress.next). Written by the agent from the
     * controller's routes. A miss drops.
     */
    @name(".FabricIngress.routing_v4")
    table routing_v4 {
        key = {
            hdr.ipv4.dst_addr : lpm @name("ipv4_dst");
        }
        actions = {
            set_next_id;
            @defaultonly drop(standard_metadata);
        }
        const default_action = drop(standard_metadata);
        size = ROUTING_V4_TABLE_SIZE;
    }

    apply {
        // The frame would leave with TTL 0: drop it here rather than forward it.
        if (hdr.ipv4.ttl <= 1) {
            mark_to_drop(standard_metadata);
            fabric_md.drop_reason = DROP_REASON_TTL_EXPIRED;
        } else {
            routing_v4.apply();
            if (standard_metadata.egress_spec == DROP_PORT) {  // a miss: the default, drop
                fabric_md.drop_reason = DROP_REASON_NO_ROUTE;
            }
        }
    }
}

#endif  // __ROUTING__
