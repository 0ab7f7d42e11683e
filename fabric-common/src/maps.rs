//! The names of the switch program's maps: the contract between the kernel side
//! (`fabric-ebpf/src/maps.rs`, where each map is a `#[map] static` of this name, since aya names
//! a map after its static) and the controller, which opens, pins and reopens them by these
//! names. The controller's loader refuses an object that lacks one of [`SWITCH`].

pub const CONFIG: &str = "CONFIG";
pub const PORTS: &str = "PORTS";
pub const EGRESS: &str = "EGRESS";
pub const ROUTES_V4: &str = "ROUTES_V4";
pub const ROUTES_V6: &str = "ROUTES_V6";
pub const GROUPS: &str = "GROUPS";
pub const PORT_COUNTERS: &str = "PORT_COUNTERS";
pub const MEMBER_COUNTERS: &str = "MEMBER_COUNTERS";
pub const QOS: &str = "QOS";
pub const PORT_RATE: &str = "PORT_RATE";
pub const QUEUES: &str = "QUEUES";
pub const ACCOUNTS: &str = "ACCOUNTS";
pub const PFC_XOFF: &str = "PFC_XOFF";
pub const POOL_USED: &str = "POOL_USED";
pub const CLASS_COUNTERS: &str = "CLASS_COUNTERS";
pub const PFC_EVENTS: &str = "PFC_EVENTS";
pub const TE_FLOWS: &str = "TE_FLOWS";
/// `flowlet` mode: a direct-mapped table of [`crate::balance::FlowletSlot`] by
/// [`crate::balance::flowlet_index`].
pub const FLOWLETS: &str = "FLOWLETS";
/// `wcmp` mode: group slot -> [`crate::balance::WcmpWeights`], kept by the controller.
pub const WCMP: &str = "WCMP";
/// Moves of the balancing modes: a per-CPU array of u64 indexed by
/// [`crate::balance::BalanceEvent`].
pub const BALANCE_COUNTERS: &str = "BALANCE_COUNTERS";
/// Injected loss per port (a [`crate::fault::PortLoss`] each).
pub const PORT_LOSS: &str = "PORT_LOSS";
/// The slow-path log records of the switch program: a ring buffer that `aya-log-ebpf` defines
/// (not a static of `fabric-ebpf/src/maps.rs`) and `aya-log` reads; pinned with the others so the
/// switch agent can reopen it and forward the records into its log.
pub const AYA_LOGS: &str = "AYA_LOGS";
/// The traffic generator's one-entry config (a [`crate::config::GeneratorConfig`]); not a
/// switch map, so not pinned.
pub const GENERATOR: &str = "GENERATOR";
/// The looping generator's laps, per CPU (one `u64`); not a switch map, so not pinned.
pub const GENERATOR_LAPS: &str = "GENERATOR_LAPS";
/// The maps of the benchmark's generators: in the object beside the switch's, never pinned.
pub const GENERATOR_MAPS: [&str; 2] = [GENERATOR, GENERATOR_LAPS];

/// Every map a switch has, in the order the controller pins them.
pub const SWITCH: [&str; 22] = [
    CONFIG,
    PORTS,
    EGRESS,
    ROUTES_V4,
    ROUTES_V6,
    GROUPS,
    PORT_COUNTERS,
    MEMBER_COUNTERS,
    QOS,
    PORT_RATE,
    QUEUES,
    ACCOUNTS,
    PFC_XOFF,
    POOL_USED,
    CLASS_COUNTERS,
    PFC_EVENTS,
    TE_FLOWS,
    FLOWLETS,
    WCMP,
    PORT_LOSS,
    BALANCE_COUNTERS,
    AYA_LOGS,
];
