/* Table, selector and counter sizes. */
#ifndef __SIZE__
#define __SIZE__

#define ACL_TABLE_SIZE             1024
#define QOS_TABLE_SIZE             64        // one entry per DSCP value
#define ROUTING_V4_TABLE_SIZE      16384
#define NEXT_TABLE_SIZE            1024
#define HASH_CONFIG_TABLE_SIZE     1         // no key: only its default action matters
#define ECMP_SELECTOR_SIZE         32w4096   // members across all groups
#define ECMP_MAX_GROUP_SIZE        64
#define ECN_TABLE_SIZE             4096      // 512 ports x 8 traffic classes
#define PFC_TABLE_SIZE             4096      // 512 ports x 8 priorities
#define PFC_WATCHDOG_TABLE_SIZE    1         // no key: only its default action matters
#define PORT_COUNTER_SIZE          512       // indexed by port number (9 bits)
#define DROP_REASONS_PER_PORT      16        // drop_reason_t is 4 bits
#define DROP_REASON_COUNTER_SIZE   8192      // 512 ports x 16 reasons: port * 16 + reason
#define QUEUE_DEPTH_LEVELS         64        // deq_qdepth 0..62, and 63 for 63 or more
#define QUEUE_DEPTH_HISTOGRAM_SIZE 32768     // 512 ports x 64 levels: port * 64 + level
#define MATRIX_SOURCE_TABLE_SIZE   512       // a ToR's host ports
#define MATRIX_DEST_TABLE_SIZE     8192      // destination prefixes, each to its class
#define MATRIX_COUNTER_SIZE        4096      // destination classes (ToRs): matrix_class_t
#define NAK_SAMPLING_TABLE_SIZE    512       // a ToR's host ports
#define ROCE_COUNTER_SIZE          32768     // 512 ports x 8 classes x 8 kinds (define.p4)

#endif  // __SIZE__
