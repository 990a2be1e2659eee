/* Parser, checksum controls and deparser of fabric.p4. */
#ifndef __PARSER__
#define __PARSER__

#include "define.p4"
#include "header.p4"

// A header that is there but is not what it says (v1model goes on to ingress with
// standard_metadata.parser_error set, as for a truncated header; FabricIngress drops both).
error {
    Ipv4HeaderInvalid
}

parser FabricParser(packet_in packet,
                    out parsed_headers_t hdr,
                    inout fabric_metadata_t fabric_md,
                    inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_MAC_CONTROL: parse_mac_control;
            ETHERTYPE_PROBE: parse_probe;
            // LLDP (0x88cc) is recognised by its ethertype alone (the acl matches eth_type).
            default: accept;
        }
    }

    state parse_mac_control {
        packet.extract(hdr.mac_control);
        transition accept;
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4 && hdr.ipv4.ihl >= 5, error.Ipv4HeaderInvalid);
        fabric_md.ip_proto = hdr.ipv4.protocol;
        // L4 is parsed only without IPv4 options; frames with options hash with ports 0.
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, PROTO_UDP): parse_udp;
            (4w5, PROTO_TCP): parse_tcp;
            (4w5, PROTO_PROBE): parse_probe;
            default: accept;
        }
    }

    state parse_probe {
        packet.extract(hdr.probe);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        fabric_md.l4_sport = hdr.udp.sport;
        fabric_md.l4_dport = hdr.udp.dport;
        transition select(hdr.udp.dport) {
            UDP_PORT_ROCEV2: parse_bth;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        fabric_md.l4_sport = hdr.tcp.sport;
        fabric_md.l4_dport = hdr.tcp.dport;
        transition accept;
    }

    state parse_bth {
        packet.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            BTH_OPCODE_ACK: parse_aeth;
            BTH_OPCODE_ATOMIC_ACK: parse_aeth;
            default: accept;
        }
    }

    state parse_aeth {
        packet.extract(hdr.aeth);
        transition accept;
    }
}

control FabricVerifyChecksum(inout parsed_headers_t hdr, inout fabric_metadata_t fabric_md) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

// TTL decrement and CE marking change the IPv4 header: recompute its checksum.
control FabricComputeChecksum(inout parsed_headers_t hdr, inout fabric_metadata_t fabric_md) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out packet, in parsed_headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.mac_control);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.probe);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.bth);
        packet.emit(hdr.aeth);
    }
}

#endif  // __PARSER__
