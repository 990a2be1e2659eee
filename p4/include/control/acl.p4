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

    /*
     * FabricIngress.acl: ternary match on ingress port, destination MAC, ethertype and IP
     * protocol, highest priority wins. Written by the agent: punt LLDP (0x88cc) and MAC
     * control / PFC (0x8808) frames to the CPU, drop what policy forbids. A miss does nothing.
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
            drop(standard_metadata);
            NoAction;
        }
        const default_action = NoAction();
        size = ACL_TABLE_SIZE;
    }

    apply {
        acl.apply();
        if (standard_metadata.egress_spec == DROP_PORT) {
            fabric_md.skip_forwarding = true;
            fabric_md.drop_reason = DROP_REASON_ACL;
        }
    }
}

#endif  // __ACL__
