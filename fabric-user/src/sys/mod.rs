//! The operating system underneath: network namespaces and rtnetlink. Everything that talks to
//! the kernel through a raw interface lives here, so the layers above stay safe code; and result
//! files, written whole ([`file::write_json`]).
pub mod cpu;
pub mod file;
pub mod netlink;
pub mod netns;
pub mod process;
