/* Egress PFC configuration and PFC counters. */
#ifndef __PFC__
#define __PFC__

#include "../define.p4"
#include "../header.p4"

control Pfc(inout parsed_headers_t hdr,
            inout fabric_metadata_t fabric_md,
            inout standard_metadata_t standard_metadata) {

    // PAUSE frames sent / received per port, PFC watchdog storms per port. Targets with a
    // PFC-capable traffic manager (softswitch) count in their traffic manager; here bmv2
    // counts the PAUSE frames that cross its pipeline: sent by the controller (packet-out)
    // and received frames punted to the CPU. bmv2 has no PFC watchdog: storms stay 0.
    @name(".FabricEgress.pfc_pause_tx_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets) pfc_pause_tx_counter;
    @name(".FabricEgress.pfc_pause_rx_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets) pfc_pause_rx_counter;
    @name(".FabricEgress.pfc_storm_counter")
    counter(PORT_COUNTER_SIZE, CounterType.packets) pfc_storm_counter;

    // xoff, xon: ingress buffer occupancy in bytes per ingress port and priority.
    @name(".FabricEgress.set_pfc_thresholds")
    action set_pfc_thresholds(bit<32> xoff, bit<32> xon) {
        fabric_md.pfc_xoff = xoff;
        fabric_md.pfc_xon = xon;
    }

    /*
     * FabricEgress.pfc_config: exact match on the ingress port (whose buffer is accounted)
     * and the priority (traffic class), gives the PFC thresholds. Written by the agent for
     * lossless classes (TC 3). Consumed by targets that implement PFC (softswitch); bmv2
     * looks it up and ignores the result.
     */
    @name(".FabricEgress.pfc_config")
    table pfc_config {
        key = {
            standard_metadata.ingress_port : exact @name("port");
            fabric_md.traffic_class        : exact @name("priority");
        }
        actions = {
            set_pfc_thresholds;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PFC_TABLE_SIZE;
    }

    // The PFC watchdog's timing: a queue paused for detect_us is a storm, which ends after
    // restore_us without a PAUSE.
    @name(".FabricEgress.set_pfc_watchdog")
    action set_pfc_watchdog(bit<32> detect_us, bit<32> restore_us) {
        fabric_md.pfc_watchdog_detect_us = detect_us;
        fabric_md.pfc_watchdog_restore_us = restore_us;
    }

    /*
     * FabricEgress.pfc_watchdog: no key; the agent sets its default action from the intent's
     * pfc_watchdog_detect_ms / pfc_watchdog_restore_ms. NoAction leaves the target's own
     * timing. Consumed by targets with a PFC watchdog (softswitch); bmv2 has none and
     * ignores the result.
     */
    @name(".FabricEgress.pfc_watchdog")
    table pfc_watchdog {
        actions = {
            set_pfc_watchdog;
            NoAction;
        }
        default_action = NoAction();
        size = PFC_WATCHDOG_TABLE_SIZE;
    }

    apply {
        pfc_config.apply();
        pfc_watchdog.apply();
        if (hdr.mac_control.isValid() && hdr.mac_control.opcode == MAC_CONTROL_OPCODE_PFC) {
            if (standard_metadata.ingress_port == CPU_PORT) {
                pfc_pause_tx_counter.count((bit<32>)standard_metadata.egress_port);
            } else {
                pfc_pause_rx_counter.count((bit<32>)standard_metadata.ingress_port);
            }
        }
    }
}

#endif  // __PFC__
