//! The log as its frames replay it: items applied in order, checked against the log's rules,
//! and undone frame by frame when a frame is refused (the intact prefix a damage report keeps).

use keel_core::{Entry, HardState, Index, LogId};

use crate::segment::Item;

/// The log as replayed from the frames.
#[derive(Clone, Debug, Default)]
pub(crate) struct Replay {
    started: bool,
    pub start: Index,
    pub entries: Vec<Entry>,
    pub hard_state: HardState,
    pub reset: Option<LogId>,
}

impl Replay {
    /// The last index in the log; `start - 1` when it holds no entries (0 before any checkpoint).
    /// A frame was replayed (its checkpoint says where the log starts).
    pub fn has_started(&self) -> bool {
        self.started
    }

    pub fn last_index(&self) -> Index {
        (self.start + self.entries.len() as Index).saturating_sub(1)
    }

    /// Drops every entry but the last (the log's start moves up past them): what verification
    /// still needs — the last index and term — without holding the log.
    pub(super) fn forget_all_but_last(&mut self) {
        let forgotten = self.entries.len().saturating_sub(1);
        if forgotten > 0 {
            self.entries.drain(..forgotten);
            self.start += forgotten as Index;
        }
    }

    /// The replay before a frame's `items` are applied, to undo them if one is refused.
    pub(super) fn savepoint(&self, items: &[Item]) -> Savepoint {
        // Only a truncate or a reset removes entries: the rare frame holding one is saved whole,
        // any other is undone by cutting the entries it appended.
        if items
            .iter()
            .any(|i| matches!(i, Item::Truncate { .. } | Item::Reset(_)))
        {
            return Savepoint::Whole(Box::new(self.clone()));
        }
        Savepoint::Tail {
            started: self.started,
            start: self.start,
            len: self.entries.len(),
            hard_state: self.hard_state,
            reset: self.reset,
        }
    }

    pub(super) fn restore(&mut self, saved: Savepoint) {
        match saved {
            Savepoint::Whole(replay) => *self = *replay,
            Savepoint::Tail {
                started,
                start,
                len,
                hard_state,
                reset,
            } => {
                self.started = started;
                self.start = start;
                self.entries.truncate(len);
                self.hard_state = hard_state;
                self.reset = reset;
            }
        }
    }

    #[expect(clippy::too_many_lines)]
    pub(super) fn apply(
        &mut self,
        item: Item,
        first_in_segment: bool,
    ) -> std::result::Result<(), String> {
        if first_in_segment != matches!(item, Item::Checkpoint { .. }) {
            return Err("a segment must start with exactly one checkpoint".into());
        }
        match item {
            Item::Checkpoint {
                first_index,
                hard_state,
                ..
            } => {
                if first_index == 0 {
                    return Err("checkpoint with first index 0".into());
                }
                if !self.started {
                    self.started = true;
                    self.start = first_index;
                    self.hard_state = hard_state;
                } else if first_index != self.last_index() + 1 || hard_state != self.hard_state {
                    return Err(format!(
                        "checkpoint (first index {first_index}, {hard_state:?}) disagrees with the \
                         log before it (last index {}, {:?})",
                        self.last_index(),
                        self.hard_state
                    ));
                }
            }
            Item::Truncate { from_index } => {
                if from_index == 0 || from_index > self.last_index() {
                    return Err(format!(
                        "truncate at {from_index} outside the log (last {})",
                        self.last_index()
                    ));
                }
                if from_index >= self.start {
                    self.entries.truncate((from_index - self.start) as usize);
                } else {
                    self.entries.clear();
                    self.start = from_index;
                }
            }
            Item::Entries(entries) => {
                let first = &entries[0];
                if first.index != self.last_index() + 1 {
                    return Err(format!(
                        "entries start at {} but the log ends at {}",
                        first.index,
                        self.last_index()
                    ));
                }
                let prev_term = self.entries.last().map_or(0, |e| e.term);
                let mut term = prev_term;
                for e in &entries {
                    if e.term < term {
                        return Err(format!("term decreases at index {}", e.index));
                    }
                    term = e.term;
                }
                self.entries.extend(entries);
            }
            Item::HardState(hs) => {
                if hs.term < self.hard_state.term {
                    return Err(format!(
                        "term goes back from {} to {}",
                        self.hard_state.term, hs.term
                    ));
                }
                self.hard_state = hs;
            }
            Item::Commit(commit) => self.hard_state.commit = commit,
            Item::Reset(snapshot) => {
                self.entries.clear();
                self.start = snapshot.index + 1;
                self.reset = Some(snapshot);
            }
            // Checked by the scan, which decides where frames are read.
            Item::Supersede { .. } => {}
        }
        Ok(())
    }
}

/// See [`Replay::savepoint`].
pub(super) enum Savepoint {
    Tail {
        started: bool,
        start: Index,
        len: usize,
        hard_state: HardState,
        reset: Option<LogId>,
    },
    Whole(Box<Replay>),
}
