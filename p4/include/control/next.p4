/* Next hop: ECMP over the members of a group by an action selector. */
#ifndef __NEXT__
#define __NEXT__

#include "../define.p4"
#include "../header.p4"

control Next(inout parsed_headers_t hdr,
             inout fabric_metadata_t fabric_md,
             inout standard_metadata_t standard_metadata) {

    // crc32, not crc16: crc16 polarises RoCEv2 flows that differ only in consecutive UDP
    // source ports (docs/bmv2.md). bmv2 picks active_members[hash % count]; the
    // output width is 32 so that the whole crc32 is the hash (railfabric/ecmp.py).
    @max_group_size(ECMP_MAX_GROUP_SIZE)
    @name(".FabricIngress.ecmp_selector")
    action_selector(HashAlgorithm.crc32, ECMP_SELECTOR_SIZE, 32w32) ecmp_selector;

    // Leave on `port` with rewritten MACs; the TTL drops by one (checked > 1 in Routing).
    @name(".FabricIngress.set_nexthop")
    action set_nexthop(port_num_t port, mac_addr_t smac, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    /*
     * FabricIngress.next: exact match on the next id, implemented by ecmp_selector hashing
     * the 5-tuple (selector fields, in this order; the source port as HashConfig left it). Written by the agent: one group per next
     * id, one member per uplink (created in ascending port order) with watch_port set so a
     * member whose port lost carrier is skipped. A miss drops (egress_spec is the drop port
     * before the lookup); bmv2 does not support a default action on a selector table.
     */
    @name(".FabricIngress.next")
    table next {
        key = {
            fabric_md.next_id    : exact @name("next_id");
            hdr.ipv4.src_addr    : selector;
            hdr.ipv4.dst_addr    : selector;
            hdr.ipv4.protocol    : selector;
            fabric_md.ecmp_sport : selector;
            fabric_md.l4_dport   : selector;
        }
        actions = {
            set_nexthop;
            @defaultonly NoAction;
        }
        implementation = ecmp_selector;
        size = NEXT_TABLE_SIZE;
    }

    apply {
        mark_to_drop(standard_metadata);
        next.apply();
        // A miss, or a group with no member to choose (bmv2 logs "yielded empty group").
        if (standard_metadata.egress_spec == DROP_PORT) {
            fabric_md.drop_reason = DROP_REASON_NO_NEXT_HOP;
        }
    }
}

#endif  // __NEXT__
