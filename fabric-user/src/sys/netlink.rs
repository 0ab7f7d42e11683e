//! Links, addresses, neighbours and routes inside a namespace, over rtnetlink.
//!
//! A netlink socket acts on the namespace it was opened in, so [`in_netns`] opens it on a thread
//! that has entered the namespace and runs the caller's requests there.
use std::{
    future::Future,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::AsRawFd,
};

use anyhow::{Context as _, Result, anyhow};
use futures::TryStreamExt as _;
use rtnetlink::{
    Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder,
    packet_route::{
        address::{AddressAttribute, AddressFlags, AddressHeaderFlags},
        link::{AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoVeth, LinkAttribute},
        neighbour::NeighbourState,
    },
};

use crate::sys::netns;

/// Runs `f` with a netlink handle bound to the named namespace (on a thread inside it).
pub fn in_netns<T, F, Fut>(ns: &str, f: F) -> Result<T>
where
    T: Send,
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = Result<T>>,
{
    netns::in_named(ns, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let (conn, handle, _) = rtnetlink::new_connection().context("opening a netlink socket")?;
            tokio::spawn(conn);
            f(handle).await
        })
    })
    .with_context(|| format!("in namespace {ns}"))
}

/// One end of a veth pair to create.
pub struct VethEnd<'a> {
    pub ifname: &'a str,
    pub mac: [u8; 6],
}

/// Creates a veth pair from the handle's namespace, the peer born directly in `peer_ns`.
pub async fn add_veth(h: &Handle, local: VethEnd<'_>, peer: VethEnd<'_>, peer_ns: &str, mtu: u32) -> Result<()> {
    let ns_file = std::fs::File::open(std::path::Path::new(netns::NETNS_DIR).join(peer_ns))
        .with_context(|| format!("opening namespace {peer_ns}"))?;
    let peer_msg = LinkMessageBuilder::<LinkUnspec>::new()
        .name(peer.ifname.to_string())
        .address(peer.mac.to_vec())
        .mtu(mtu)
        .setns_by_fd(ns_file.as_raw_fd())
        .build();
    let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(local.ifname.to_string())
        .address(local.mac.to_vec())
        .mtu(mtu)
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
        .build();
    h.link()
        .add(msg)
        .execute()
        .await
        .with_context(|| format!("creating veth {} <-> {}:{}", local.ifname, peer_ns, peer.ifname))
}

pub async fn ifindex(h: &Handle, name: &str) -> Result<u32> {
    let link = h
        .link()
        .get()
        .match_name(name.to_string())
        .execute()
        .try_next()
        .await
        .with_context(|| format!("looking up link {name}"))?
        .ok_or_else(|| anyhow!("no link {name}"))?;
    Ok(link.header.index)
}

pub async fn set_up(h: &Handle, index: u32, up: bool) -> Result<()> {
    let b = LinkUnspec::new_with_index(index);
    let msg = if up { b.up() } else { b.down() }.build();
    h.link()
        .set(msg)
        .execute()
        .await
        .with_context(|| format!("setting link {index} {}", if up { "up" } else { "down" }))
}

/// Tells the kernel to generate no IPv6 address of its own on a link (IFLA_INET6_ADDR_GEN_MODE
/// none): no link-local address, hence no duplicate address detection, router solicitation or
/// link-local traffic of the kernel's making. Must precede the link's first `up`, which is when
/// the kernel would generate it.
pub async fn disable_ipv6_address_generation(h: &Handle, index: u32) -> Result<()> {
    let spec = vec![AfSpecUnspec::Inet6(vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)])];
    let msg = LinkUnspec::new_with_index(index).append_extra_attribute(LinkAttribute::AfSpecUnspec(spec)).build();
    h.link().set(msg).execute().await.with_context(|| format!("turning off IPv6 address generation on link {index}"))
}

/// Adds (or replaces) an address. An IPv6 address skips duplicate address detection
/// (IFA_F_NODAD): every address of a testbed is the plan's, on a point-to-point link, and
/// asking per address needs no per-namespace sysctl (whose first touch costs O(namespaces)).
pub async fn add_address(h: &Handle, index: u32, addr: IpAddr, prefix_len: u8) -> Result<()> {
    let mut req = h.address().add(index, addr, prefix_len).replace();
    if addr.is_ipv6() {
        let msg = req.message_mut();
        msg.header.flags |= AddressHeaderFlags::Nodad;
        msg.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    req.execute().await.with_context(|| format!("adding {addr}/{prefix_len} to link {index}"))
}

/// One address of the handle's namespace, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub index: u32,
    pub addr: IpAddr,
    pub prefix_len: u8,
    /// IFA_F_TENTATIVE: not usable yet (duplicate address detection, or the kernel's addrconf
    /// work not run yet).
    pub tentative: bool,
    pub dad_failed: bool,
}

/// Every address of the handle's namespace (both families).
pub async fn addresses(h: &Handle) -> Result<Vec<Address>> {
    let mut out = Vec::new();
    let mut dump = h.address().get().execute();
    while let Some(msg) = dump.try_next().await.context("listing addresses")? {
        let mut flags = AddressFlags::empty();
        let mut addr = None;
        for attr in &msg.attributes {
            match attr {
                AddressAttribute::Flags(f) => flags = *f,
                // IFA_LOCAL is the interface's own address where both are given (IPv4).
                AddressAttribute::Local(a) => addr = Some(*a),
                AddressAttribute::Address(a) => addr = addr.or(Some(*a)),
                _ => {}
            }
        }
        let Some(addr) = addr else { continue };
        let header = msg.header.flags;
        out.push(Address {
            index: msg.header.index,
            addr,
            prefix_len: msg.header.prefix_len,
            tentative: flags.contains(AddressFlags::Tentative) || header.contains(AddressHeaderFlags::Tentative),
            dad_failed: flags.contains(AddressFlags::Dadfailed) || header.contains(AddressHeaderFlags::Dadfailed),
        });
    }
    Ok(out)
}

/// A permanent neighbour entry, so that ARP/ND can never make forwarding flaky.
pub async fn add_neighbour(h: &Handle, index: u32, addr: IpAddr, mac: [u8; 6]) -> Result<()> {
    h.neighbours()
        .add(index, addr)
        .link_layer_address(&mac)
        .state(NeighbourState::Permanent)
        .replace()
        .execute()
        .await
        .with_context(|| format!("neighbour {addr} on link {index}"))
}

pub async fn add_default_route_v4(h: &Handle, gateway: Ipv4Addr, index: u32) -> Result<()> {
    let msg = RouteMessageBuilder::<Ipv4Addr>::new().gateway(gateway).output_interface(index).build();
    h.route().add(msg).replace().execute().await.context("adding the IPv4 default route")
}

pub async fn add_default_route_v6(h: &Handle, gateway: Ipv6Addr, index: u32) -> Result<()> {
    let msg = RouteMessageBuilder::<Ipv6Addr>::new().gateway(gateway).output_interface(index).build();
    h.route().add(msg).replace().execute().await.context("adding the IPv6 default route")
}
