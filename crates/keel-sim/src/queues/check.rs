//! The delivery checker of the queue workload (`queues/mod.rs`): what the queue clients saw,
//! against the state the converged cluster holds at the end of the run.
//!
//! Every element is pushed once (its value is unique across the run) onto the queue list; an
//! element leaves the queue by a pop (delivered, gone) or by a move onto the processing list
//! (delivered from the queue, then held there until a pop of the processing list delivers it).
//! Stream entries are added once and delivered by `XREADGROUP >` to one consumer of the group.
//! The rules, each a violation when broken:
//!
//! 1. **At most once from each list.** No element is delivered twice from the same list (a
//!    pop, a move or a script's pop, seen by any client); a moved element may be delivered once
//!    more, from the processing list it was moved to. No stream entry is delivered twice.
//! 2. **Gone once delivered.** An element delivered from a list is not in that list at the end,
//!    and no element is in both lists or twice in one.
//! 3. **Only what was pushed.** Every element seen anywhere was pushed by some client (its push
//!    acknowledged or of unknown outcome); every stream entry delivered was added.
//! 4. **Nothing lost.** An element whose push was acknowledged is in the queue at the end, or was
//!    delivered from it; one moved to the processing list is there, or was delivered from it.
//!    Elements that left a list without a delivery anyone saw are counted against the operations
//!    on that list whose outcome is unknown, each of which could take one element at most:
//!    more of them than such operations is a loss. An acknowledged stream entry is in the stream
//!    (nothing trims it).
//! 5. **Timeouts kept.** A blocking pop that answered null did so no sooner than its timeout
//!    after it was sent (the client sits beside its node, and the node counts the timeout from
//!    the request's arrival in simulated time).

use std::collections::{HashMap, HashSet};

/// The two lists of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum List {
    /// Where elements are pushed.
    Queue,
    /// Where moves put them (the reliable-queue pattern).
    Processing,
}

impl List {
    pub(crate) fn index(self) -> usize {
        match self {
            List::Queue => 0,
            List::Processing => 1,
        }
    }
}

/// An element as the clients write it: unique across the run.
pub(crate) type Element = u64;

/// What the queue clients saw during the run.
#[derive(Debug, Default)]
pub(crate) struct QueueHistory {
    /// Elements pushed with an acknowledgement, and pushed with an unknown outcome.
    pub acked: Vec<Element>,
    pub maybe_pushed: Vec<Element>,
    /// Deliveries a client saw: the element, the list it was taken from, and whether it was
    /// moved onto the processing list (not gone).
    pub delivered: Vec<(Element, List, bool)>,
    /// Operations taking from each list whose outcome is unknown (each takes one at most).
    pub unknown_takes: [usize; 2],
    /// Stream entries added with an acknowledgement (their ids), added with an unknown outcome
    /// (their elements: the id is not known), and delivered by `XREADGROUP >`.
    pub stream_acked: Vec<(String, Element)>,
    pub stream_maybe: Vec<Element>,
    pub stream_delivered: Vec<(String, Element)>,
    /// Blocking pops that answered null: sent at, answered at, timeout (simulated ms).
    pub null_waits: Vec<(u64, u64, u64)>,
}

/// The state the cluster converged on: the lists, front first, and the stream's entries.
#[derive(Debug, Default)]
pub(crate) struct FinalQueues {
    pub lists: [Vec<Element>; 2],
    pub stream: Vec<(String, Element)>,
}

/// Checks the rules of the module documentation; `Err` names the first one broken.
pub(crate) fn check(history: &QueueHistory, end: &FinalQueues) -> Result<(), String> {
    check_timeouts(history)?;
    check_lists(history, end)?;
    check_stream(history, end)
}

fn check_timeouts(history: &QueueHistory) -> Result<(), String> {
    for &(sent, answered, timeout) in &history.null_waits {
        if answered < sent + timeout {
            return Err(format!(
                "a blocking pop with a timeout of {timeout} ms sent at {sent} answered null at \
                 {answered}, before its timeout"
            ));
        }
    }
    Ok(())
}

/// Where each element was seen.
#[derive(Default)]
struct Seen {
    /// Deliveries from each list.
    from: [usize; 2],
    /// Whether a delivery from the queue moved it.
    moved: bool,
    /// Times it is in each list at the end.
    held: [usize; 2],
}

fn check_lists(history: &QueueHistory, end: &FinalQueues) -> Result<(), String> {
    let mut seen: HashMap<Element, Seen> = HashMap::new();
    for &(element, list, moved) in &history.delivered {
        let s = seen.entry(element).or_default();
        s.from[list.index()] += 1;
        s.moved |= moved;
    }
    for list in [List::Queue, List::Processing] {
        for &element in &end.lists[list.index()] {
            seen.entry(element).or_default().held[list.index()] += 1;
        }
    }
    let pushed: HashSet<Element> = history
        .acked
        .iter()
        .chain(&history.maybe_pushed)
        .copied()
        .collect();
    let mut elements: Vec<&Element> = seen.keys().collect();
    elements.sort_unstable();
    for element in elements {
        let s = &seen[element];
        if !pushed.contains(element) {
            return Err(format!("element {element} was seen but never pushed"));
        }
        for list in [List::Queue, List::Processing] {
            let (from, held) = (s.from[list.index()], s.held[list.index()]);
            if from > 1 {
                return Err(format!(
                    "element {element} delivered {from} times from {list:?}"
                ));
            }
            if from == 1 && held > 0 {
                return Err(format!(
                    "element {element} delivered from {list:?} and still in it"
                ));
            }
        }
        if s.held[0] + s.held[1] > 1 {
            return Err(format!(
                "element {element} held {:?} times at the end",
                s.held
            ));
        }
    }
    check_losses(history, &seen)
}

/// Rule 4: the elements that left a list unseen, against the unknown operations on it.
fn check_losses(history: &QueueHistory, seen: &HashMap<Element, Seen>) -> Result<(), String> {
    let none = Seen::default();
    let mut unseen = [Vec::new(), Vec::new()];
    // In the processing list (or delivered from it) without a move anyone saw: an unknown
    // operation on the queue moved it.
    for (element, s) in seen {
        let in_processing = s.held[1] > 0 || s.from[1] > 0;
        if in_processing && !s.moved {
            unseen[0].push(*element);
        }
    }
    for element in &history.acked {
        let s = seen.get(element).unwrap_or(&none);
        let in_processing = s.held[1] > 0 || s.from[1] > 0;
        if s.held[0] > 0 || in_processing {
            continue; // still queued, or accounted for above
        }
        if s.from[0] == 0 {
            unseen[0].push(*element);
        } else if s.moved {
            unseen[1].push(*element);
        }
    }
    for list in [List::Queue, List::Processing] {
        let (gone, unknown) = (
            &mut unseen[list.index()],
            history.unknown_takes[list.index()],
        );
        if gone.len() > unknown {
            gone.sort_unstable();
            return Err(format!(
                "{} elements left {list:?} without a delivery anyone saw, but only {unknown} \
                 operations on it have an unknown outcome: lost among {gone:?}",
                gone.len()
            ));
        }
    }
    Ok(())
}

fn check_stream(history: &QueueHistory, end: &FinalQueues) -> Result<(), String> {
    let stored: HashMap<&str, Element> = end.stream.iter().map(|(id, e)| (&id[..], *e)).collect();
    for (id, element) in &history.stream_acked {
        if stored.get(&id[..]) != Some(element) {
            return Err(format!(
                "stream entry {id} ({element}) was added and is gone"
            ));
        }
    }
    let added: HashSet<Element> = history
        .stream_acked
        .iter()
        .map(|(_, e)| *e)
        .chain(history.stream_maybe.iter().copied())
        .collect();
    let mut delivered = HashSet::new();
    for (id, element) in &history.stream_delivered {
        if !delivered.insert(id) {
            return Err(format!("stream entry {id} delivered twice to the group"));
        }
        if !added.contains(element) {
            return Err(format!(
                "stream entry {id} ({element}) delivered, never added"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three pushes: 1 popped, 2 moved and then popped from the processing list, 3 still queued.
    fn clean() -> (QueueHistory, FinalQueues) {
        let history = QueueHistory {
            acked: vec![1, 2, 3],
            delivered: vec![
                (1, List::Queue, false),
                (2, List::Queue, true),
                (2, List::Processing, false),
            ],
            stream_acked: vec![("5-0".into(), 7)],
            stream_delivered: vec![("5-0".into(), 7)],
            null_waits: vec![(100, 150, 50)],
            ..QueueHistory::default()
        };
        let end = FinalQueues {
            lists: [vec![3], vec![]],
            stream: vec![("5-0".into(), 7)],
        };
        (history, end)
    }

    #[test]
    fn a_clean_history_passes() {
        let (history, end) = clean();
        assert_eq!(check(&history, &end), Ok(()));
    }

    #[test]
    fn an_element_delivered_twice_is_caught() {
        let (mut history, end) = clean();
        history.delivered.push((1, List::Queue, false));
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("element 1 delivered 2 times"), "{error}");
    }

    #[test]
    fn an_element_delivered_and_still_queued_is_caught() {
        let (mut history, end) = clean();
        history.delivered.push((3, List::Queue, false));
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("still in it"), "{error}");
    }

    #[test]
    fn a_lost_element_is_caught_unless_an_unknown_operation_could_have_taken_it() {
        let (history, mut end) = clean();
        end.lists[0].clear();
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("lost among [3]"), "{error}");
        let history = QueueHistory {
            unknown_takes: [1, 0],
            ..history
        };
        assert_eq!(check(&history, &end), Ok(()));
    }

    #[test]
    fn a_moved_element_lost_from_the_processing_list_is_caught() {
        let (mut history, end) = clean();
        history.delivered.pop();
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("left Processing"), "{error}");
    }

    #[test]
    fn an_element_never_pushed_is_caught() {
        let (history, mut end) = clean();
        end.lists[1].push(9);
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("never pushed"), "{error}");
    }

    #[test]
    fn stream_entries_lost_or_delivered_twice_are_caught() {
        let (mut history, mut end) = clean();
        history.stream_delivered.push(("5-0".into(), 7));
        assert!(check(&history, &end)
            .unwrap_err()
            .contains("delivered twice"));
        history.stream_delivered.pop();
        end.stream.clear();
        assert!(check(&history, &end).unwrap_err().contains("is gone"));
    }

    #[test]
    fn a_timeout_cut_short_is_caught() {
        let (mut history, end) = clean();
        history.null_waits.push((100, 120, 50));
        let error = check(&history, &end).unwrap_err();
        assert!(error.contains("before its timeout"), "{error}");
    }
}
