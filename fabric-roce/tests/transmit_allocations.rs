//! The transmit path allocates nothing per packet: a sender and a receiver driven packet by
//! packet, as a packet-level simulator drives them, through DCQCN with every packet CE-marked
//! (so CNPs flow too), count the heap allocations their thread makes once warmed up.
use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    net::Ipv4Addr,
};

use fabric_roce::{
    buf::PacketBuf,
    cc::{CongestionControl, ReceiverQp, SenderQp, dcqcn::Dcqcn},
    dcqcn::DcqcnParams,
    icrc::IpPair,
    pacer::PacerConfig,
    qp::{Connection, DEFAULT_PKEY, Requester, RequesterConfig, Responder, ResponderConfig},
};

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call goes to the system allocator unchanged; counting touches no heap memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as the caller promised for this call.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promised for this call.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as the caller promised for this call.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as the caller promised for this call.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

struct Chain {
    tx: SenderQp,
    rx: ReceiverQp,
    tx_cc: Dcqcn,
    rx_cc: Dcqcn,
    buf: PacketBuf,
    feedback: Vec<fabric_roce::cc::Feedback>,
    now: u64,
    packets: u64,
}

impl Chain {
    fn new() -> Self {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 6));
        let req = Connection {
            local_qp: 0x11,
            remote_qp: 0x12,
            pkey: DEFAULT_PKEY,
            ip: IpPair::V4 { src: a, dst: b },
            udp_src_port: 0xC011,
        };
        let resp = Connection { local_qp: 0x12, remote_qp: 0x11, ip: req.ip.reversed(), ..req };
        let line = 10_000_000_000;
        let mut cfg = RequesterConfig::new(req);
        cfg.pacer = Some(PacerConfig { rate_bps: line, burst_bytes: 2200 });
        let params = DcqcnParams { cnp_interval_ns: 0, ..DcqcnParams::default() };
        let (mut tx_cc, mut rx_cc) = (Dcqcn::new(params, line), Dcqcn::new(params, line));
        // One long message: completions (one per message) are not what is measured.
        let tx = SenderQp::new(Requester::new(cfg), 1 << 30, &mut tx_cc, 0).unwrap();
        let rx = ReceiverQp::new(Responder::new(ResponderConfig::new(resp)), 1 << 30, &mut rx_cc);
        Chain { tx, rx, tx_cc, rx_cc, buf: PacketBuf::new(), feedback: Vec::new(), now: 0, packets: 0 }
    }

    /// Every packet is delivered at once, marked CE, and dropped once handled.
    fn run(&mut self, packets: u64) {
        let end = self.packets + packets;
        while self.packets < end {
            let Chain { tx, rx, tx_cc, rx_cc, buf, feedback, now, packets } = self;
            let (mut sent, mut next) = (0, None);
            while tx.poll_transmit(tx_cc, *now, 1, buf, |p| next = Some(p)) == 1 {
                let p = next.take().expect("one packet");
                sent += 1;
                if let Some(ack) = rx.on_packet(rx_cc, &p, true, *now, buf) {
                    tx.on_packet(tx_cc, &ack, *now).unwrap();
                }
                rx_cc.poll_feedback(*now, true, buf, feedback);
                for f in feedback.drain(..) {
                    let cnp = rx.feedback_packet(f, buf);
                    tx.on_packet(tx_cc, &cnp, *now).unwrap();
                }
            }
            *packets += sent;
            *now = tx.poll_timeout(tx_cc, *now).unwrap().max(*now + 1);
        }
    }
}

#[test]
fn a_warm_sender_and_receiver_allocate_nothing_per_packet() {
    let mut chain = Chain::new();
    chain.run(2_000);
    let before = allocations();
    chain.run(50_000);
    let during = allocations() - before;
    assert!(chain.rx.cnps_sent() > 1_000, "CNPs flowed: {}", chain.rx.cnps_sent());
    assert!(chain.rx.responder.counters().packets_accepted >= 52_000);
    // A block of 64 KiB now and then at most, never one per packet.
    assert!(during < 50, "{during} allocations for 50 000 packets, their ACKs and CNPs");
}
