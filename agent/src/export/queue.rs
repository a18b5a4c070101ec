//! The bounded export queue between the webhook and the publisher (the seed's "delivery
//! behavior"): at most 1,024 messages — counting those still being built — and 16 MiB of
//! encoded records. A request thread reserves a slot before it builds a record, so a burst is
//! refused before it costs any encoding; it never blocks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use super::counters::DropReason;

/// What goes through the queue to the publisher thread.
pub enum Message {
    /// An encoded record (JSON, no newline).
    Record(Vec<u8>),
    /// Write to this channel directory from now on (`None`: no usable Connection).
    Reconfigure(Option<PathBuf>),
    /// Shutdown: everything queued before this message has been handled (or dropped after
    /// the deadline); complete the open segment and answer.
    Drain(tokio::sync::oneshot::Sender<()>),
}

/// The queue's fixed limits.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    pub messages: usize,
    pub bytes: usize,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            messages: 1024,
            bytes: 16 * 1024 * 1024,
        }
    }
}

/// The sending side, shared by every request.
pub struct Queue {
    limits: QueueLimits,
    messages: AtomicUsize,
    bytes: AtomicUsize,
    closed: AtomicBool,
    tx: mpsc::Sender<Message>,
}

/// A reserved place in the queue; released when dropped unless the record was sent.
pub struct Slot<'q> {
    queue: &'q Queue,
    sent: bool,
}

impl Queue {
    pub fn new(limits: QueueLimits, tx: mpsc::Sender<Message>) -> Self {
        Self {
            limits,
            messages: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            tx,
        }
    }

    /// Reserves room for one message, or says why there is none.
    pub fn reserve(&self) -> Result<Slot<'_>, DropReason> {
        if self.closed.load(Ordering::Acquire) {
            return Err(DropReason::Shutdown);
        }
        let reserved = self
            .messages
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.messages).then_some(n + 1)
            });
        match reserved {
            Ok(_) => Ok(Slot {
                queue: self,
                sent: false,
            }),
            Err(_) => Err(DropReason::QueueFull),
        }
    }

    /// Messages reserved or waiting, and their encoded bytes.
    pub fn depth(&self) -> (usize, usize) {
        (
            self.messages.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }

    /// Called by the publisher when it is done with a record of `len` bytes (written or not).
    pub fn release(&self, len: usize) {
        self.messages.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(len, Ordering::AcqRel);
    }

    /// Refuses every later record (reason `shutdown`).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Sends a control message to the publisher.
    pub fn control(&self, message: Message) -> bool {
        self.tx.send(message).is_ok()
    }
}

impl Slot<'_> {
    /// Queues an encoded record; the slot is consumed either way.
    pub fn send(mut self, record: Vec<u8>) -> Result<(), DropReason> {
        let queue = self.queue;
        let len = record.len();
        let fits = queue
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + len <= queue.limits.bytes).then_some(b + len)
            });
        if fits.is_err() {
            return Err(DropReason::QueueFull);
        }
        if queue.tx.send(Message::Record(record)).is_err() {
            queue.bytes.fetch_sub(len, Ordering::AcqRel);
            return Err(DropReason::Shutdown);
        }
        self.sent = true;
        Ok(())
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.queue.messages.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_until_released_and_bytes_are_bounded() {
        let (tx, rx) = mpsc::channel();
        let queue = Queue::new(
            QueueLimits {
                messages: 2,
                bytes: 10,
            },
            tx,
        );
        let a = queue.reserve().unwrap();
        let b = queue.reserve().unwrap();
        assert!(matches!(queue.reserve(), Err(DropReason::QueueFull)));
        drop(b); // built nothing: the slot comes back
        let b = queue.reserve().unwrap();
        a.send(vec![b'x'; 6]).unwrap();
        assert!(matches!(b.send(vec![b'y'; 6]), Err(DropReason::QueueFull)));
        assert_eq!(queue.depth(), (1, 6));
        assert!(matches!(rx.try_recv(), Ok(Message::Record(r)) if r.len() == 6));
        queue.release(6);
        assert_eq!(queue.depth(), (0, 0));
        queue.close();
        assert!(matches!(queue.reserve(), Err(DropReason::Shutdown)));
    }
}
