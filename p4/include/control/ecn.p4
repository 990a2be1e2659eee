/* Egress ECN marking from the queue depth at enqueue (RED-like, per port and class). */
#ifndef __ECN__
#define __ECN__

#include "../define.p4"
#include "../header.p4"

control EcnMarking(inout parsed_headers_t hdr,
                   inout fabric_metadata_t fabric_md,
                   inout standard_metadata_t standard_metadata) {

    @name(".FabricEgress.ecn_mark_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets) ecn_mark_counter;

    bit<32> ecn_kmin = 0;
    bit<32> ecn_kmax = 0;
    bit<32> ecn_pmax = 0;

    // kmin, kmax: queue depth in bytes; pmax: marking probability at kmax in parts per million.
    @name(".FabricEgress.set_ecn_thresholds")
    action set_ecn_thresholds(bit<32> kmin, bit<32> kmax, bit<32> pmax) {
        ecn_kmin = kmin;
        ecn_kmax = kmax;
        ecn_pmax = pmax;
    }

    /*
     * FabricEgress.ecn_marking: exact match on the egress port and traffic class, gives the
     * marking thresholds. Written by the agent from the fabric's congestion-control profile
     * (DCQCN). A miss never marks.
     */
    @name(".FabricEgress.ecn_marking")
    table ecn_marking {
        key = {
            standard_metadata.egress_port : exact @name("eg_port");
            fabric_md.traffic_class       : exact @name("traffic_class");
        }
        actions = {
            set_ecn_thresholds;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = ECN_TABLE_SIZE;
    }

    apply {
        if (hdr.ipv4.isValid() && (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1)) {
            if (ecn_marking.apply().hit) {
                bit<64> depth = (bit<64>)standard_metadata.enq_qdepth * BYTES_PER_QUEUED_PACKET;
                bool mark = false;
                if (depth > (bit<64>)ecn_kmax) {
                    mark = true;
                } else if (depth >= (bit<64>)ecn_kmin) {
                    // Mark with probability pmax * (depth - kmin) / (kmax - kmin), written
                    // without a division: r / PPM_MAX < that, r uniform in [0, PPM_MAX).
                    bit<32> r;
                    random(r, 0, PPM_MAX - 1);
                    mark = (bit<64>)r * (bit<64>)(ecn_kmax - ecn_kmin)
                        < (bit<64>)ecn_pmax * (depth - (bit<64>)ecn_kmin);
                }
                if (mark) {
                    hdr.ipv4.ecn = ECN_CE;
                    ecn_mark_counter.count((bit<32>)standard_metadata.egress_port);
                }
            }
        }
    }
}

#endif  // __ECN__
