//! The controller's picture of forwarding, shared by traffic engineering and the simulator: the
//! ECMP groups in installed order ([`fabric::SimFabric`]), the flows a step opens exactly as the
//! endpoints open them ([`flows`]), and the path each takes under the data path's own hash
//! ([`route`]).
pub mod fabric;
pub mod flows;
pub mod route;
