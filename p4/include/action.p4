/*
 * Actions shared by several controls. P4Info action names are global, and p4c refuses two
 * actions with the same control-plane name, so an action used by tables in different controls
 * is declared once here (p4c localizes a copy into each control, keeping the one name).
 */
#ifndef __ACTION__
#define __ACTION__

// Drop the frame. Used by FabricIngress.acl entries and as FabricIngress.routing_v4's miss.
@name(".FabricIngress.drop")
action drop(inout standard_metadata_t smeta) {
    mark_to_drop(smeta);
}

#endif  // __ACTION__
