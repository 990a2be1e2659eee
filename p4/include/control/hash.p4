/* What the ECMP selector hashes: the 5-tuple, or with RoCEv2's destination QP mixed in. */
#ifndef __HASH__
#define __HASH__

#include "../define.p4"
#include "../header.p4"

control HashConfig(inout parsed_headers_t hdr,
                   inout fabric_metadata_t fabric_md,
                   inout standard_metadata_t standard_metadata) {

    @name(".FabricIngress.hash_qp")
    action hash_qp() {
        fabric_md.hash_qp = true;
    }

    /*
     * FabricIngress.hash_config: no key; the agent sets its default action from the intent's
     * `ecmp.hash` (hash_qp for five_tuple_qp). NoAction hashes the 5-tuple.
     */
    @name(".FabricIngress.hash_config")
    table hash_config {
        actions = {
            hash_qp;
            NoAction;
        }
        default_action = NoAction();
        size = HASH_CONFIG_TABLE_SIZE;
    }

    apply {
        fabric_md.ecmp_sport = fabric_md.l4_sport;
        hash_config.apply();
        // One NIC pair's queue pairs often share a UDP source port: fold the 24-bit QP into
        // 16 bits and XOR it in. A QP of 0 leaves the hashed bytes those of the 5-tuple, so
        // the option changes nothing for traffic that is not RoCEv2 (railfabric/ecmp.py).
        if (fabric_md.hash_qp && hdr.bth.isValid()) {
            fabric_md.ecmp_sport = fabric_md.l4_sport ^ hdr.bth.dst_qp[15:0]
                                   ^ (bit<16>) hdr.bth.dst_qp[23:16];
        }
    }
}

#endif  // __HASH__
