//! Packets in flight: what they are (a RoCE packet as `fabric-roce` represents it, without
//! payload bytes), and the pool they live in while they cross the fabric.
//!
//! The payload-less choice: a WRITE's payload is a slice of one static buffer of zeros and no
//! ICRC is computed; the frame length every queue, counter and link sees is the length the
//! bytes would have (`RocePacketRepr::buffer_len` plus Ethernet, IP and UDP headers). Packets
//! live in a slab reused through a free list, and queues and events hold their 32-bit indices:
//! no allocation per packet once the slab has grown to the most packets in flight.
use bytes::Bytes;
use fabric_roce::wire::RocePacketRepr;

/// A packet's contents.
#[derive(Clone, Debug)]
pub enum Payload {
    /// Data, ACK, NAK or CNP.
    Roce(RocePacketRepr<'static>),
    /// A congestion control's own message (CTS's grant) as bytes: rare, so carried whole.
    Control(Bytes),
}

#[derive(Clone, Debug)]
pub struct Packet {
    pub payload: Payload,
    /// Index of the QP in the run.
    pub qp: u32,
    /// Bytes XDP would see: Ethernet header to ICRC.
    pub frame_len: u32,
    /// IP TOS: DSCP (its class) and ECN (a switch may set CE).
    pub tos: u8,
    /// Requester to responder (data); else responder to requester.
    pub to_responder: bool,
}

/// The slab of packets in flight.
#[derive(Debug, Default)]
pub struct PacketPool {
    slots: Vec<Option<Packet>>,
    free: Vec<u32>,
    peak: usize,
}

impl PacketPool {
    pub fn insert(&mut self, p: Packet) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(p);
                id
            }
            None => {
                self.slots.push(Some(p));
                (self.slots.len() - 1) as u32
            }
        };
        self.peak = self.peak.max(self.slots.len() - self.free.len());
        id
    }

    pub fn get(&self, id: u32) -> &Packet {
        self.slots[id as usize].as_ref().expect("a live packet")
    }

    pub fn get_mut(&mut self, id: u32) -> &mut Packet {
        self.slots[id as usize].as_mut().expect("a live packet")
    }

    pub fn remove(&mut self, id: u32) -> Packet {
        let p = self.slots[id as usize].take().expect("a live packet");
        self.free.push(id);
        p
    }

    /// The most packets alive at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
    }
}
