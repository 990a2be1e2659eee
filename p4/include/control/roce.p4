/*
 * RoCEv2 signals where packets enter a switch: every RoCEv2 packet counted by ingress port,
 * traffic class and kind (data, ACK, NAK by syndrome, CNP), and NAKs copied to the CPU on the
 * ports nak_sampling lists (a ToR's host ports, where a responder's NAK enters the fabric), at
 * most one per port per interval. The controller turns the counts into NAK and CNP rates and
 * places each sampled NAK's flow on its predicted path, so the links that NAK-ing flows share
 * stand out (docs/architecture.md §10).
 */
#ifndef __ROCE__
#define __ROCE__

#include "../define.p4"
#include "../header.p4"

control RoceSignals(inout parsed_headers_t hdr,
                    inout fabric_metadata_t fabric_md,
                    inout standard_metadata_t standard_metadata) {
    @name(".FabricIngress.roce_counter")
    counter(ROCE_COUNTER_SIZE, CounterType.packets) roce_counter;

    // When each port last sampled a NAK: the low 32 bits of ingress_global_timestamp (bmv2
    // counts microseconds); unsigned subtraction stays right across the wrap (71 minutes).
    @name(".FabricIngress.nak_sample_time")
    register<bit<32>>(PORT_COUNTER_SIZE) nak_sample_time;

    bit<32> nak_interval_us = 0;

    @name(".FabricIngress.sample_naks")
    action sample_naks(bit<32> interval_us) {
        nak_interval_us = interval_us;
    }

    /*
     * FabricIngress.nak_sampling: the ports whose NAKs are sampled, one entry each with the
     * least time between two samples; a miss samples nothing.
     */
    @name(".FabricIngress.nak_sampling")
    table nak_sampling {
        key = {
            standard_metadata.ingress_port : exact @name("ig_port");
        }
        actions = {
            sample_naks;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NAK_SAMPLING_TABLE_SIZE;
    }

    apply {
        if (hdr.bth.isValid()) {
            roce_kind_t kind = ROCE_KIND_DATA;
            if (hdr.bth.opcode == BTH_OPCODE_CNP) {
                kind = ROCE_KIND_CNP;
            } else if (hdr.aeth.isValid()) {
                bit<2> aeth_type = hdr.aeth.syndrome[6:5];
                if (aeth_type == AETH_TYPE_ACK) {
                    kind = ROCE_KIND_ACK;
                } else if (aeth_type == AETH_TYPE_RNR_NAK) {
                    kind = ROCE_KIND_NAK_RNR;
                } else if (aeth_type == AETH_TYPE_NAK
                           && hdr.aeth.syndrome[4:0] == AETH_NAK_PSN_SEQUENCE_ERROR) {
                    kind = ROCE_KIND_NAK_PSN_SEQUENCE;
                } else {
                    kind = ROCE_KIND_NAK_OTHER;
                }
            }
            roce_counter.count((bit<32>)standard_metadata.ingress_port * ROCE_CELLS_PER_PORT
                               + (bit<32>)fabric_md.traffic_class * ROCE_KINDS
                               + (bit<32>)kind);
            if (kind >= ROCE_KIND_NAK_PSN_SEQUENCE && kind <= ROCE_KIND_NAK_OTHER) {
                if (nak_sampling.apply().hit) {
                    bit<32> now = (bit<32>)standard_metadata.ingress_global_timestamp;
                    bit<32> last;
                    nak_sample_time.read(last, (bit<32>)standard_metadata.ingress_port);
                    if (now - last >= nak_interval_us) {
                        nak_sample_time.write((bit<32>)standard_metadata.ingress_port, now);
                        // bmv2 clones the frame as it arrived, with its ingress port, to the
                        // session's port; PacketIoEgress adds the packet-in header there.
                        clone(CloneType.I2E, NAK_SAMPLE_SESSION);
                    }
                }
            }
        }
    }
}

#endif  // __ROCE__
