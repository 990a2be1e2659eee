/*
 * Egress queue occupancy per port, from v1model's deq_qdepth: what a departing frame left
 * queued behind it (bmv2: frames in the frame's own priority queue; softswitch models it in
 * bytes, see softswitch/README.md).
 *
 * Two forms, because P4Runtime cannot read registers on bmv2 (PI answers RegisterEntry reads
 * and writes UNIMPLEMENTED, "Register reads are not supported yet"; docs/bmv2.md):
 *   - queue_depth and queue_watermark, registers: the last depth, and the highest since the
 *     control plane last wrote 0. Exact; read where P4Runtime serves registers (softswitch),
 *     and on bmv2 only by Thrift (`register_read FabricEgress.queue_watermark PORT`).
 *   - queue_depth_histogram, a counter every target serves: one count per departing frame at
 *     index port * QUEUE_DEPTH_LEVELS + min(depth, QUEUE_DEPTH_LEVELS - 1). The highest level
 *     that counted since the previous read is the watermark, exact below 63 (bmv2 queues hold
 *     64 frames by default, so a frame leaves at most 63 behind). Counters only add, so the
 *     depth now has no such form.
 */
#ifndef __QUEUE_DEPTH__
#define __QUEUE_DEPTH__

#include "../define.p4"
#include "../header.p4"

control QueueDepth(inout parsed_headers_t hdr,
                   inout fabric_metadata_t fabric_md,
                   inout standard_metadata_t standard_metadata) {
    @name(".FabricEgress.queue_depth")
    register<bit<32>>(PORT_COUNTER_SIZE) queue_depth;
    @name(".FabricEgress.queue_watermark")
    register<bit<32>>(PORT_COUNTER_SIZE) queue_watermark;
    @name(".FabricEgress.queue_depth_histogram")
    counter(QUEUE_DEPTH_HISTOGRAM_SIZE, CounterType.packets) queue_depth_histogram;

    apply {
        bit<32> port = (bit<32>)standard_metadata.egress_port;
        bit<32> depth = (bit<32>)standard_metadata.deq_qdepth;
        queue_depth.write(port, depth);
        bit<32> highest;
        queue_watermark.read(highest, port);
        if (depth > highest) {
            queue_watermark.write(port, depth);
        }
        bit<32> level = depth;
        if (level > QUEUE_DEPTH_LEVELS - 1) {
            level = QUEUE_DEPTH_LEVELS - 1;
        }
        queue_depth_histogram.count(port * QUEUE_DEPTH_LEVELS + level);
    }
}

#endif  // __QUEUE_DEPTH__
