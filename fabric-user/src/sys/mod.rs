//! The operating system underneath: network namespaces and rtnetlink. Everything that talks to
//! the kernel through a raw interface lives here, so the layers above stay safe code.
pub mod cpu;
pub mod netlink;
pub mod netns;
