//! A connection's open streams by id, looked up without hashing: either end opens its streams in
//! order, 1, 3, 5… (or 2, 4…), so the open ones have ids close together and a table indexed by
//! `id / 2` modulo its size holds them without collision while they span fewer ids than it has
//! slots. A stream that collides all the same (one left open while the ids moved a whole table
//! on, or a peer's ids chosen to collide) goes to a hashed map beside it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The table's first size (a connection with one stream at a time never grows it), and the
/// largest it grows to (beyond, collisions are hashed): room for a server's 100 streams in
/// order, in the memory a hashed map of them takes (64 bytes a slot).
const FIRST_SLOTS: usize = 4;
const MAX_SLOTS: usize = 128;

pub(super) struct Streams<V> {
    /// Slot `id / 2 % len` (a power of two, or empty while no stream was opened).
    slots: Vec<Option<(u32, V)>>,
    /// The streams that found their slot taken.
    spill: HashMap<u32, V, BuildHasherDefault<IdHasher>>,
    /// Streams in `slots`.
    in_slots: usize,
}

impl<V> Default for Streams<V> {
    fn default() -> Self {
        Streams {
            slots: Vec::new(),
            spill: HashMap::default(),
            in_slots: 0,
        }
    }
}

impl<V> Streams<V> {
    pub(super) fn len(&self) -> usize {
        self.in_slots + self.spill.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn index(&self, id: u32) -> usize {
        (id >> 1) as usize & (self.slots.len().wrapping_sub(1))
    }

    pub(super) fn get(&self, id: u32) -> Option<&V> {
        match self.slots.get(self.index(id)) {
            Some(Some((i, v))) if *i == id => Some(v),
            _ if self.spill.is_empty() => None,
            _ => self.spill_get(id),
        }
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut V> {
        let at = self.index(id);
        match self.slots.get_mut(at) {
            Some(Some((i, v))) if *i == id => Some(v),
            _ if self.spill.is_empty() => None,
            _ => spilled_mut(&mut self.spill, id),
        }
    }

    /// The spill's lookups are out of line and cold: the slots' paths stay short.
    #[cold]
    #[inline(never)]
    fn spill_get(&self, id: u32) -> Option<&V> {
        self.spill.get(&id)
    }

    /// Add stream `id`, not open yet.
    pub(super) fn insert(&mut self, id: u32, v: V) {
        debug_assert!(self.get(id).is_none(), "stream {id} open already");
        loop {
            if self.slots.is_empty() {
                self.slots.resize_with(FIRST_SLOTS, || None);
            }
            let at = self.index(id);
            if self.slots[at].is_none() {
                self.slots[at] = Some((id, v));
                self.in_slots += 1;
                return;
            }
            if self.slots.len() >= MAX_SLOTS {
                self.spill.insert(id, v);
                return;
            }
            self.grow();
        }
    }

    /// Twice the slots, the streams in them placed again: an old slot's stream goes to one of
    /// two new ones (`id / 2` modulo twice the size), which no other old slot's can take.
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots.resize_with(old.len() * 2, || None);
        for (id, v) in old.into_iter().flatten() {
            let at = self.index(id);
            debug_assert!(self.slots[at].is_none());
            self.slots[at] = Some((id, v));
        }
    }

    pub(super) fn remove(&mut self, id: u32) -> Option<V> {
        let at = self.index(id);
        if let Some(slot) = self.slots.get_mut(at) {
            if let Some((_, v)) = slot.take_if(|(i, _)| *i == id) {
                self.in_slots -= 1;
                return Some(v);
            }
        }
        if self.spill.is_empty() {
            return None;
        }
        self.spill_remove(id)
    }

    /// (Out of line, as `spill_get`.)
    #[cold]
    #[inline(never)]
    fn spill_remove(&mut self, id: u32) -> Option<V> {
        self.spill.remove(&id)
    }

    /// Keep only the streams for which `keep` says so.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(u32, &mut V) -> bool) {
        for slot in &mut self.slots {
            if slot.take_if(|(id, v)| !keep(*id, v)).is_some() {
                self.in_slots -= 1;
            }
        }
        self.spill.retain(|&id, v| keep(id, v));
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        let slots = self.slots.iter_mut().flatten().map(|(_, v)| v);
        slots.chain(self.spill.values_mut())
    }

    /// Streams it has room for without allocating.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.slots.capacity() + self.spill.capacity()
    }
}

/// [`Streams::get_mut`]'s way into the spill, out of line as `spill_get` (a free function: the
/// slots stay borrowed).
#[cold]
#[inline(never)]
fn spilled_mut<V>(
    spill: &mut HashMap<u32, V, BuildHasherDefault<IdHasher>>,
    id: u32,
) -> Option<&mut V> {
    spill.get_mut(&id)
}

/// Stream ids are distinct small integers: one multiplication spreads them. (Not the id itself:
/// hashbrown tags each slot with the hash's top 7 bits, all zero for small ids, so a lookup would
/// compare every key of its group.)
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = n.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids in order, out-of-order removals, a stream left open while the ids move on past the
    /// largest table, and ids chosen to collide: every stream is found, removed once, counted.
    #[test]
    fn streams_are_found_whatever_their_ids() {
        let mut s = Streams::default();
        let mut open = std::collections::BTreeSet::new();
        // Stream 1 stays open throughout; the others come and go ten at a time.
        s.insert(1, 1u32);
        open.insert(1);
        let mut next = 3;
        for round in 0..400u32 {
            for _ in 0..10 {
                s.insert(next, next);
                open.insert(next);
                next += 2;
            }
            let gone: Vec<u32> = open
                .iter()
                .copied()
                .filter(|&id| id != 1)
                .rev()
                .take(9)
                .collect();
            for id in gone {
                assert_eq!(s.remove(id), Some(id), "round {round}");
                open.remove(&id);
            }
            assert_eq!(s.len(), open.len());
        }
        // Ids 2 * MAX_SLOTS apart share a slot in the largest table.
        for k in 0..5 {
            let id = 1_000_001 + k * 2 * MAX_SLOTS as u32;
            s.insert(id, id);
            open.insert(id);
        }
        assert_eq!(s.len(), open.len());
        assert!(s.slots.len() <= MAX_SLOTS);
        for &id in &open {
            assert_eq!(s.get(id), Some(&id));
            *s.get_mut(id).unwrap() += 0;
        }
        assert_eq!(s.get(next), None);
        assert_eq!(s.remove(next), None);
        s.retain(|id, _| id % 4 == 1);
        open.retain(|id| id % 4 == 1);
        assert_eq!(s.values_mut().count(), open.len());
        for &id in &open {
            assert_eq!(s.remove(id), Some(id));
        }
        assert!(s.is_empty());
    }
}
