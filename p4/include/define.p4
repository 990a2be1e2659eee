/*
 * Constants and types shared by every control of fabric.p4.
 * Names follow fabric-tna: types snake_case_t, constants UPPER_SNAKE.
 */
#ifndef __DEFINE__
#define __DEFINE__

typedef bit<9>  port_num_t;
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> l4_port_t;
typedef bit<3>  traffic_class_t;
typedef bit<32> next_id_t;
// A destination class of the traffic matrix (control/traffic_matrix.p4): an index of
// FabricIngress.matrix_counter, below MATRIX_COUNTER_SIZE.
typedef bit<16> matrix_class_t;

// Ports start at 1; the CPU port is 255 (bmv2 --cpu-port 255); 511 is bmv2's drop port.
const port_num_t CPU_PORT  = 255;
const port_num_t DROP_PORT = 511;

const bit<16> ETHERTYPE_IPV4        = 0x0800;
const bit<16> ETHERTYPE_LLDP        = 0x88cc;
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;
// Latency probes (railfabric/latency.py, checked by tests/unit/p4): a link probe is an
// Ethernet frame of this type (IEEE 802 local experimental ethertype 1), a mesh probe IPv4 of
// protocol PROTO_PROBE (RFC 3692's experimental 253); both carry a probe_t after the header.
const bit<16> ETHERTYPE_PROBE       = 0x88b5;

// IEEE 802.1Qbb priority-based flow control opcode inside a MAC control frame.
const bit<16> MAC_CONTROL_OPCODE_PFC = 0x0101;

const bit<8> PROTO_TCP = 6;
const bit<8> PROTO_UDP = 17;
const bit<8> PROTO_PROBE = 253;

// probe_t: "RFPB", version 1; a request is answered by the switch it reaches (control/acl.p4).
const bit<32> PROBE_MAGIC      = 0x52465042;
const bit<8>  PROBE_VERSION    = 1;
const bit<8>  PROBE_OP_REQUEST = 1;
const bit<8>  PROBE_OP_REPLY   = 2;

// RoCEv2 runs over UDP with this well-known destination port.
const l4_port_t UDP_PORT_ROCEV2 = 4791;

// BTH opcodes the program tells apart (IBA vol. 1, 9.2; RoCEv2 annex A17 for the CNP).
const bit<8> BTH_OPCODE_ACK        = 0x11;  // RC Acknowledge: AETH follows
const bit<8> BTH_OPCODE_ATOMIC_ACK = 0x12;  // RC Atomic Acknowledge: AETH follows
const bit<8> BTH_OPCODE_CNP        = 0x81;  // Congestion Notification Packet

// AETH syndrome type (bits 6:5) and the NAK code of a PSN sequence error (bits 4:0).
const bit<2> AETH_TYPE_ACK     = 0;
const bit<2> AETH_TYPE_RNR_NAK = 1;
const bit<2> AETH_TYPE_NAK     = 3;
const bit<5> AETH_NAK_PSN_SEQUENCE_ERROR = 0;

// What a RoCEv2 packet is, counted in FabricIngress.roce_counter at index
// ingress_port * ROCE_CELLS_PER_PORT + traffic_class * ROCE_KINDS + kind: the values of
// railfabric.v1.RoceKind (proto/railfabric/v1/control.proto; railfabric/fabric_counters.py,
// checked by tests/unit/p4).
typedef bit<3> roce_kind_t;
const roce_kind_t ROCE_KIND_DATA             = 1;
const roce_kind_t ROCE_KIND_ACK              = 2;
const roce_kind_t ROCE_KIND_NAK_PSN_SEQUENCE = 3;
const roce_kind_t ROCE_KIND_NAK_RNR          = 4;
const roce_kind_t ROCE_KIND_NAK_OTHER        = 5;
const roce_kind_t ROCE_KIND_CNP              = 6;
const bit<32> ROCE_KINDS          = 8;   // roce_kind_t is 3 bits
const bit<32> ROCE_CELLS_PER_PORT = 64;  // 8 traffic classes x 8 kinds

// The clone session that copies sampled NAKs to the CPU port (control/roce.p4); the agent
// writes it as a P4Runtime CloneSessionEntry with one replica, the CPU port.
const bit<32> NAK_SAMPLE_SESSION = 1;

// ECN codepoints (RFC 3168).
const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_ECT1    = 1;
const bit<2> ECN_ECT0    = 2;
const bit<2> ECN_CE      = 3;

// Traffic classes (shared convention): DSCP 26 -> TC 3 (RoCEv2, lossless, PFC priority 3),
// DSCP 48 -> TC 6 (CNP, strict priority), everything else TC 0. The qos_classify table holds
// the mapping; these constants document it.
const traffic_class_t TC_BEST_EFFORT = 0;
const traffic_class_t TC_ROCE        = 3;
const traffic_class_t TC_CNP         = 6;

// bmv2 exposes the queue depth at enqueue in packets only; ECN thresholds are in bytes, so the
// program approximates the depth in bytes as packets * a full-size frame.
const bit<64> BYTES_PER_QUEUED_PACKET = 1500;

// ECN marking probabilities are in parts per million.
const bit<32> PPM_MAX = 1000000;

// Why a frame was dropped: the values of railfabric.v1.DropReason (proto/railfabric/v1/
// control.proto; railfabric/fabric_counters.py, checked by tests/unit/p4). Each drop site sets
// fabric_md.drop_reason; DropCounter counts it in FabricIngress.drop_reason_counter at index
// ingress_port * DROP_REASONS_PER_PORT + reason. The program sets 1..6 itself. 7..11 happen
// outside it: a port the target does not have, and the traffic manager's and the host's
// losses, which a target counts into the same counter itself (softswitch) or not at all (bmv2).
typedef bit<4> drop_reason_t;
const drop_reason_t DROP_REASON_UNSPECIFIED     = 0;
const drop_reason_t DROP_REASON_NO_ROUTE        = 1;
const drop_reason_t DROP_REASON_TTL_EXPIRED     = 2;
const drop_reason_t DROP_REASON_ACL             = 3;
const drop_reason_t DROP_REASON_NOT_IPV4        = 4;
const drop_reason_t DROP_REASON_NO_NEXT_HOP     = 5;
const drop_reason_t DROP_REASON_MALFORMED       = 6;
const drop_reason_t DROP_REASON_BAD_EGRESS_PORT = 7;
const drop_reason_t DROP_REASON_QUEUE_FULL      = 8;
const drop_reason_t DROP_REASON_HEADROOM_FULL   = 9;
const drop_reason_t DROP_REASON_PFC_WATCHDOG    = 10;
const drop_reason_t DROP_REASON_KERNEL          = 11;

#endif  // __DEFINE__
