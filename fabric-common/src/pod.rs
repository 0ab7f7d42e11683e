//! `aya::Pod` for the map value types: all are `repr(C)`, padding-free and valid for any bytes.
use crate::config::{GeneratorConfig, PortInfo, SwitchConfig};
use crate::counters::{MemberCounters, PortCounters};
use crate::fault::PortLoss;
use crate::qos::{ClassCounters, PfcEvent, QosConfig};
use crate::queue::{EgressQueue, IngressAccount, LineRate};
use crate::route::{EcmpGroup, GroupMember};
use crate::te::TeEntry;

// SAFETY: repr(C) structs of integers and byte arrays with no implicit padding (size asserted
// next to each definition), so every bit pattern is a valid value.
unsafe impl aya::Pod for PortInfo {}
// SAFETY: as above.
unsafe impl aya::Pod for SwitchConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for GeneratorConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for PortCounters {}
// SAFETY: as above.
unsafe impl aya::Pod for MemberCounters {}
// SAFETY: as above.
unsafe impl aya::Pod for EcmpGroup {}
// SAFETY: as above.
unsafe impl aya::Pod for GroupMember {}
// SAFETY: as above.
unsafe impl aya::Pod for QosConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for ClassCounters {}
// SAFETY: as above.
unsafe impl aya::Pod for PfcEvent {}
// SAFETY: as above.
unsafe impl aya::Pod for EgressQueue {}
// SAFETY: as above.
unsafe impl aya::Pod for IngressAccount {}
// SAFETY: as above (six u64).
unsafe impl aya::Pod for LineRate {}
// SAFETY: as above.
unsafe impl aya::Pod for TeEntry {}
// SAFETY: as above.
unsafe impl aya::Pod for PortLoss {}
// SAFETY: as above.
unsafe impl aya::Pod for crate::balance::FlowletSlot {}
// SAFETY: as above.
unsafe impl aya::Pod for crate::balance::WcmpWeights {}
