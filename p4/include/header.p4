/* Headers fabric.p4 parses, the controller packet-I/O headers and the metadata it carries. */
#ifndef __HEADER__
#define __HEADER__

#include "define.p4"

// Packet-in: prepended to frames sent to the CPU port. Explicit padding to whole bytes.
@controller_header("packet_in")
header packet_in_header_t {
    port_num_t ingress_port;
    bit<7>     _pad;
}

// Packet-out: prepended by the controller; the frame leaves egress_port as is.
@controller_header("packet_out")
header packet_out_header_t {
    port_num_t egress_port;
    bit<7>     _pad;
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// MAC control frame (ethertype 0x8808): only the opcode is parsed, enough to recognise PFC.
header mac_control_t {
    bit<16> opcode;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_t {
    l4_port_t sport;
    l4_port_t dport;
    bit<16>   len;
    bit<16>   checksum;
}

header tcp_t {
    l4_port_t sport;
    l4_port_t dport;
    bit<32>   seq_no;
    bit<32>   ack_no;
    bit<4>    data_offset;
    bit<4>    res;
    bit<8>    flags;
    bit<16>   window;
    bit<16>   checksum;
    bit<16>   urgent_ptr;
}

// InfiniBand base transport header carried by RoCEv2 (UDP port 4791).
header bth_t {
    bit<8>  opcode;
    bit<1>  solicited_event;
    bit<1>  mig_req;
    bit<2>  pad_count;
    bit<4>  transport_version;
    bit<16> partition_key;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  reserved0;
    bit<24> dst_qp;
    bit<1>  ack_req;
    bit<7>  reserved1;
    bit<24> psn;
}

// InfiniBand ACK extended transport header: follows the BTH of an Acknowledge and an Atomic
// Acknowledge. Syndrome bits 6:5 say ACK (00), RNR NAK (01) or NAK (11); for a NAK bits 4:0
// are its code, 0 a PSN sequence error (IBA vol. 1, 9.7.5.1).
header aeth_t {
    bit<8>  syndrome;
    bit<24> msn;
}

// The start of a latency probe's payload (railfabric/latency.py): enough to tell a request
// from a reply; the rest (kind, port, sequence, times) is the sender's and passes untouched.
header probe_t {
    bit<32> magic;
    bit<8>  version;
    bit<8>  op;
}

struct parsed_headers_t {
    packet_out_header_t packet_out;
    packet_in_header_t  packet_in;
    ethernet_t          ethernet;
    mac_control_t       mac_control;
    ipv4_t              ipv4;
    probe_t             probe;
    udp_t               udp;
    tcp_t               tcp;
    bth_t               bth;
    aeth_t              aeth;
}

struct fabric_metadata_t {
    // L4 ports from UDP or TCP, else 0: the selector hashes them in this form.
    l4_port_t       l4_sport;
    l4_port_t       l4_dport;
    // The source port the selector hashes: l4_sport, with the RoCEv2 QP folded in when
    // FabricIngress.hash_config says so (control/hash.p4).
    l4_port_t       ecmp_sport;
    bool            hash_qp;
    // ipv4.protocol when IPv4, else 0 (the acl matches it for every frame).
    bit<8>          ip_proto;
    traffic_class_t traffic_class;
    next_id_t       next_id;
    bool            next_id_valid;
    // Set when a control has decided the frame's fate (punt): later forwarding is skipped.
    bool            skip_forwarding;
    // Set by FabricIngress.answer_probe: the probe address a mesh probe request must carry
    // to be answered here (0 for link probes, which carry none).
    bool            answer_probe;
    ipv4_addr_t     probe_address;
    // Why the frame is dropped, set where it is (define.p4); counted by DropCounter.
    drop_reason_t   drop_reason;
    // Filled by FabricEgress.pfc_config; consumed by targets that implement PFC.
    bit<32>         pfc_xoff;
    bit<32>         pfc_xon;
    // Filled by FabricEgress.pfc_watchdog; consumed by targets with a PFC watchdog.
    bit<32>         pfc_watchdog_detect_us;
    bit<32>         pfc_watchdog_restore_us;
}

#endif  // __HEADER__
