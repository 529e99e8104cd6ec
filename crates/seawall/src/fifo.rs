//! A FIFO of byte strings in one fixed buffer: the queue of a shaped entity.
//! One allocation when the entity first queues, none per packet.

/// Bytes in front of each record: length (u32) and tag (u128).
const REC: usize = 20;
/// A length that marks "the rest of the buffer is unused, go to the start".
const WRAP: u32 = u32::MAX;

/// The queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fifo {
    buf: Vec<u8>,
    /// Where the oldest record starts.
    head: usize,
    /// Where the next record goes.
    tail: usize,
    items: usize,
    /// Bytes of data queued (without record headers).
    bytes: usize,
}

impl Fifo {
    /// A queue of `capacity` bytes (records and their headers).
    pub(crate) fn new(capacity: usize) -> Fifo {
        Fifo {
            buf: vec![0; capacity],
            ..Fifo::default()
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.items
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends `data` with `tag`; false (and nothing queued) if it does not fit.
    pub(crate) fn push(&mut self, tag: u128, data: &[u8]) -> bool {
        let need = REC + data.len();
        if need > self.buf.len() {
            return false;
        }
        if self.items == 0 {
            self.head = 0;
            self.tail = 0;
        }
        let at = if self.tail >= self.head {
            // Free space: [tail, end) and [0, head).
            if self.buf.len() - self.tail >= need {
                self.tail
            } else if self.head >= need + usize::from(self.items > 0) {
                // Mark the skipped end (if a length fits there) and wrap.
                if self.buf.len() - self.tail >= 4 {
                    self.buf[self.tail..self.tail + 4].copy_from_slice(&WRAP.to_ne_bytes());
                }
                0
            } else {
                return false;
            }
        } else if self.head - self.tail > need {
            // Wrapped: free space is [tail, head); one byte stays free so a
            // full queue never looks empty (tail == head).
            self.tail
        } else {
            return false;
        };
        self.buf[at..at + 4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        self.buf[at + 4..at + REC].copy_from_slice(&tag.to_ne_bytes());
        self.buf[at + REC..at + need].copy_from_slice(data);
        self.tail = at + need;
        self.items += 1;
        self.bytes += data.len();
        true
    }

    /// Where the oldest record starts, skipping a wrap marker.
    fn head_at(&self) -> usize {
        let h = self.head;
        if self.buf.len() - h < REC {
            return 0;
        }
        let len = u32::from_ne_bytes([
            self.buf[h],
            self.buf[h + 1],
            self.buf[h + 2],
            self.buf[h + 3],
        ]);
        if len == WRAP {
            0
        } else {
            h
        }
    }

    /// The oldest record: (tag, data).
    pub(crate) fn front(&self) -> Option<(u128, &[u8])> {
        if self.items == 0 {
            return None;
        }
        let h = self.head_at();
        let b = &self.buf;
        let len = u32::from_ne_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]) as usize;
        let mut t = [0u8; 16];
        t.copy_from_slice(&b[h + 4..h + REC]);
        Some((u128::from_ne_bytes(t), &b[h + REC..h + REC + len]))
    }

    /// Drops the oldest record.
    pub(crate) fn pop(&mut self) {
        if self.items == 0 {
            return;
        }
        let h = self.head_at();
        let b = &self.buf;
        let len = u32::from_ne_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]) as usize;
        self.head = h + REC + len;
        self.items -= 1;
        self.bytes -= len;
        if self.items == 0 {
            self.head = 0;
            self.tail = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Random pushes and pops against a `VecDeque`: same contents, same order,
    /// and every push that is refused really would not fit.
    #[test]
    fn behaves_like_a_deque() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for cap in [64usize, 100, 1000, 4096] {
            let mut f = Fifo::new(cap);
            let mut model: VecDeque<(u128, Vec<u8>)> = VecDeque::new();
            for step in 0..20_000u64 {
                if next() % 3 != 0 {
                    let len = (next() % 70) as usize;
                    let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ step) as u8).collect();
                    let used: usize = model.iter().map(|(_, d)| d.len() + REC).sum();
                    // Tags use their high bits too.
                    let tag = u128::from(step) << 64 | u128::from(step);
                    if f.push(tag, &data) {
                        model.push_back((tag, data));
                    } else {
                        // Refused only when it could not fit even unwrapped.
                        assert!(
                            used + REC + len > cap / 2 || REC + len > cap,
                            "cap {cap} used {used} len {len}"
                        );
                    }
                } else {
                    match (f.front(), model.front()) {
                        (Some((t, d)), Some((mt, md))) => {
                            assert_eq!((t, d), (*mt, &md[..]));
                            f.pop();
                            model.pop_front();
                        }
                        (None, None) => {}
                        (a, b) => panic!("fifo {a:?} model {b:?}"),
                    }
                }
                assert_eq!(f.len(), model.len());
                assert_eq!(f.bytes(), model.iter().map(|(_, d)| d.len()).sum::<usize>());
            }
        }
    }

    #[test]
    fn too_big_is_refused_and_empty_resets() {
        let mut f = Fifo::new(REC + 28);
        assert!(!f.push(1, &[0; 29]));
        assert!(f.push(1, &[1; 20]));
        assert!(!f.push(2, &[2; 20]));
        f.pop();
        assert!(f.is_empty());
        // The whole buffer is usable again.
        assert!(f.push(3, &[3; 28]));
        assert_eq!(f.front(), Some((3, &[3u8; 28][..])));
    }
}
