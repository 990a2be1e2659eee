/* Ingress access control: punt control-plane frames to the CPU, drop unwanted ones. */
#ifndef __ACL__
#define __ACL__

#include "../define.p4"
#include "../header.p4"
#include "../action.p4"

control Acl(inout parsed_headers_t hdr,
            inout fabric_metadata_t fabric_md,
            inout standard_metadata_t standard_metadata) {

    // Send the frame to the CPU port (it leaves with a packet-in header) and stop forwarding.
    @name(".FabricIngress.punt_to_cpu")
    action punt_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
        fabric_md.skip_forwarding = true;
    }

    // A latency probe: a request is answered here, in the data plane (below); a reply, or a
    // request this switch does not answer, goes to the CPU like punt_to_cpu. `address` is the
    // switch's probe address, the destination a mesh probe request must carry (0 for link
    // probes, which carry none).
    @name(".FabricIngress.answer_probe")
    action answer_probe(ipv4_addr_t address) {
        standard_metadata.egress_spec = CPU_PORT;
        fabric_md.skip_forwarding = true;
        fabric_md.answer_probe = true;
        fabric_md.probe_address = address;
    }

    /*
     * FabricIngress.acl: ternary match on ingress port, destination MAC, ethertype and IP
     * protocol, highest priority wins. Written by the agent: punt LLDP (0x88cc) and MAC
     * control / PFC (0x8808) frames to the CPU, answer latency probes, drop what policy
     * forbids. A miss does nothing.
     */
    @name(".FabricIngress.acl")
    table acl {
        key = {
            standard_metadata.ingress_port : ternary @name("ig_port");
            hdr.ethernet.dst_addr          : ternary @name("eth_dst");
            hdr.ethernet.ether_type        : ternary @name("eth_type");
            fabric_md.ip_proto             : ternary @name("ip_proto");
        }
        actions = {
            punt_to_cpu;
            answer_probe;
            drop(standard_metadata);
            NoAction;
        }
        const default_action = NoAction();
        size = ACL_TABLE_SIZE;
    }

    apply {
        acl.apply();
        // The answer goes back out of the port the request came in on, addresses swapped: to
        // the neighbour that sent it (a link probe) or routed from there to the sender (a mesh
        // probe). The IPv4 checksum is unchanged by the swap; the sender's payload is kept. A
        // request to a group address is not answered (its answer's source would be one).
        if (fabric_md.answer_probe && hdr.probe.isValid()
                && hdr.probe.magic == PROBE_MAGIC && hdr.probe.version == PROBE_VERSION
                && hdr.probe.op == PROBE_OP_REQUEST && hdr.ethernet.dst_addr[40:40] == 0
                && (!hdr.ipv4.isValid() || hdr.ipv4.dst_addr == fabric_md.probe_address)) {
            mac_addr_t mac = hdr.ethernet.dst_addr;
            hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
            hdr.ethernet.src_addr = mac;
            if (hdr.ipv4.isValid()) {
                ipv4_addr_t address = hdr.ipv4.dst_addr;
                hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = address;
            }
            hdr.probe.op = PROBE_OP_REPLY;
            standard_metadata.egress_spec = standard_metadata.ingress_port;
        }
        if (standard_metadata.egress_spec == DROP_PORT) {
            fabric_md.skip_forwarding = true;
            fabric_md.drop_reason = DROP_REASON_ACL;
        }
    }
}

#endif  // __ACL__
