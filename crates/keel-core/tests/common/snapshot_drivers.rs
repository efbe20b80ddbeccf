// Included by `snapshot_scenarios.rs` (see there): the single-node and cluster drivers of the
// snapshot scenarios.

// ----- one node driven by hand -----

struct Solo {
    node: RaftNode,
    disk: MemStorage,
    /// Every entry ever handed out in `Ready::committed`, in order.
    handed: Vec<Entry>,
    /// `handed.len()` when each install was handed out.
    installs: Vec<(usize, SnapshotMeta)>,
    sent: Vec<Message>,
    writes: Vec<Write>,
    /// The commit index observed after every input.
    commits: Vec<Index>,
}

impl Solo {
    fn new(config: Config, terms: &[Term], hard_state: HardState) -> Self {
        let disk = storage_with(&VOTERS, terms, hard_state);
        let node = RaftNode::new(config, disk.recover().unwrap()).unwrap();
        let commits = vec![node.commit_index()];
        Solo {
            node,
            disk,
            handed: Vec::new(),
            installs: Vec::new(),
            sent: Vec::new(),
            writes: Vec::new(),
            commits,
        }
    }

    fn observe(&mut self) {
        let c = self.node.commit_index();
        let last = *self.commits.last().unwrap();
        assert!(c >= last, "commit went back from {last} to {c}");
        self.commits.push(c);
        assert_log_monotonic(&self.node);
    }

    fn step(&mut self, from: NodeId, term: Term, body: MessageBody) {
        let to = self.node.id();
        self.node.step(Message {
            from,
            to,
            term,
            body,
        });
        self.observe();
    }

    /// One `ready()`: records what it hands out, persists its write at once. Applying is the
    /// caller's business (the application may be slow).
    fn ready(&mut self) -> Ready {
        let rd = self.node.ready();
        self.handed.extend(rd.committed.iter().cloned());
        if let Some(m) = &rd.install_snapshot {
            self.installs.push((self.handed.len(), m.clone()));
        }
        self.sent.extend(rd.messages.iter().cloned());
        if let Some(w) = &rd.write {
            self.disk.write(w).unwrap();
            self.node.persisted(w.id);
            self.writes.push(w.clone());
        }
        self.observe();
        rd
    }

    fn replies(&self) -> Vec<AppendResult> {
        self.sent
            .iter()
            .filter_map(|m| match m.body {
                MessageBody::AppendResponse(r) => Some(r),
                _ => None,
            })
            .collect()
    }
}

// ----- a cluster with a snapshot transport and a model application -----

#[derive(Default)]
struct App {
    /// The state machine: every log id it reflects, in index order.
    sm: Vec<LogId>,
    /// Snapshots restored, in order.
    restores: Vec<LogId>,
}

impl App {
    fn applied(&self) -> Index {
        self.sm.last().map_or(0, |l| l.index)
    }
}

struct Sim {
    c: Cluster,
    apps: BTreeMap<NodeId, App>,
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Deliver requested snapshot sends at once (as `InstallSnapshot` messages on the queue);
    /// otherwise hold them in `held_snapshots`.
    auto_snapshots: bool,
    held_snapshots: Vec<Message>,
    /// Nodes whose application takes what it is handed but reports nothing applied until a
    /// restore.
    slow_apply: BTreeSet<NodeId>,
    /// Highest commit index observed per node in its present lifetime.
    commit_seen: BTreeMap<NodeId, Index>,
}

impl Sim {
    fn new(n: u64, tweak: impl Fn(&mut Config)) -> Self {
        Sim {
            c: Cluster::with_config(n, tweak),
            apps: (1..=n).map(|id| (id, App::default())).collect(),
            cut: BTreeSet::new(),
            auto_snapshots: true,
            held_snapshots: Vec::new(),
            slow_apply: BTreeSet::new(),
            commit_seen: BTreeMap::new(),
        }
    }

    fn node(&self, id: NodeId) -> &RaftNode {
        self.c.node(id)
    }

    fn isolate(&mut self, id: NodeId) {
        for other in self.c.peers.keys().copied().collect::<Vec<_>>() {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    fn up(&self) -> Vec<NodeId> {
        let up = self.c.peers.iter().filter(|(_, p)| p.node.is_some());
        up.map(|(id, _)| *id).collect()
    }

    fn observe(&mut self, id: NodeId) {
        let Some(node) = self.c.peers[&id].node.as_ref() else {
            return;
        };
        let commit = node.commit_index();
        let seen = self.commit_seen.entry(id).or_insert(0);
        assert!(
            commit >= *seen,
            "node {id}: commit went back from {seen} to {commit}"
        );
        *seen = commit;
        assert_log_monotonic(node);
    }

    #[expect(clippy::too_many_lines)]
    fn process(&mut self, id: NodeId) {
        let peer = self.c.peers.get_mut(&id).expect("no such node");
        let Some(node) = peer.node.as_mut() else {
            return;
        };
        let rd = node.ready();
        let app = self.apps.get_mut(&id).unwrap();
        for e in &rd.committed {
            let on_disk = peer.storage.entries().iter().find(|d| d.index == e.index);
            assert_eq!(on_disk.map(|d| d.term), Some(e.term), "S23 on node {id}");
            assert_eq!(
                e.index,
                app.applied() + 1,
                "node {id}: {} handed out after {} (skipped or repeated)",
                e.log_id(),
                app.applied()
            );
            let known = *self.c.committed.entry(e.index).or_insert(e.term);
            assert_eq!(known, e.term, "state machine safety at {}", e.index);
            app.sm.push(e.log_id());
        }
        if let Some(last) = rd.committed.last() {
            if !self.slow_apply.contains(&id) {
                node.applied(last.index);
            }
        }
        if let Some(m) = &rd.install_snapshot {
            // Restore: after what it was handed, the state machine becomes the snapshot's.
            let at = m.last.index;
            assert!(
                at > app.applied(),
                "node {id}: restore of {} rewinds",
                m.last
            );
            let sm: Vec<LogId> = self
                .c
                .committed
                .range(..=at)
                .map(|(&i, &t)| LogId::new(t, i))
                .collect();
            assert_eq!(
                sm.len() as Index,
                at,
                "snapshot {} of unknown entries",
                m.last
            );
            assert_eq!(
                sm.last().copied(),
                Some(m.last),
                "snapshot is not committed"
            );
            app.sm = sm;
            app.restores.push(m.last);
            node.applied(at);
        }
        let term = node.term();
        for (to, m) in rd.send_snapshots {
            let msg = Message {
                from: id,
                to,
                term,
                body: MessageBody::InstallSnapshot { meta: m },
            };
            if self.auto_snapshots {
                self.c.queue.push_back(msg);
            } else {
                self.held_snapshots.push(msg);
            }
        }
        peer.pending_writes.extend(rd.write);
        let hold = peer.hold_writes;
        self.c.sent.extend(rd.messages.iter().cloned());
        self.c.queue.extend(rd.messages);
        if !hold {
            self.c.complete_writes(id);
        }
        self.observe(id);
    }

    fn deliver(&mut self, m: Message) {
        let up = self.c.peers[&m.to].node.is_some();
        if up && !self.cut.contains(&(m.from, m.to)) {
            let to = m.to;
            self.c.node_mut(to).step(m);
            self.observe(to);
        }
    }

    fn run(&mut self) {
        for _ in 0..100_000 {
            for id in self.up() {
                let mut rounds = 0;
                while self.node(id).has_ready() {
                    self.process(id);
                    rounds += 1;
                    assert!(rounds < 1000, "node {id} never runs out of Ready");
                }
            }
            let Some(m) = self.c.queue.pop_front() else {
                return;
            };
            self.deliver(m);
        }
        panic!("did not quiesce");
    }

    fn tick_all(&mut self, ticks: u32) {
        for _ in 0..ticks {
            for id in self.up() {
                self.c.tick(id);
                self.observe(id);
            }
            self.run();
        }
    }

    fn elect(&mut self, id: NodeId) -> Term {
        for _ in 0..5 {
            self.c.node_mut(id).campaign();
            self.run();
            if self.node(id).role() == Role::Leader {
                return self.node(id).term();
            }
        }
        panic!("node {id} cannot win an election");
    }

    fn propose(&mut self, id: NodeId, data: &str) -> LogId {
        self.c.propose(id, data)
    }

    fn propose_and_commit(&mut self, id: NodeId, data: &str) -> LogId {
        let lid = self.propose(id, data);
        self.run();
        assert_eq!(self.node(id).commit_status(lid), CommitStatus::Committed);
        lid
    }

    /// The application of `id` snapshots at what it applied; the node purges its log.
    fn snapshot(&mut self, id: NodeId) -> SnapshotMeta {
        let applied = self.node(id).status().applied;
        let m = self
            .node(id)
            .snapshot_meta(applied)
            .expect("applied is held");
        self.c.peer(id).storage.save_snapshot(&m);
        self.c.node_mut(id).snapshot_saved(m.clone());
        m
    }

    fn crash(&mut self, id: NodeId) {
        self.c.crash(id);
        self.apps.insert(id, App::default());
        self.commit_seen.remove(&id);
    }

    fn restart(&mut self, id: NodeId) {
        self.c.restart(id);
        // The state machine comes back as the durable snapshot.
        let at = self.c.peers[&id].storage.snapshot().index;
        let app = self.apps.get_mut(&id).unwrap();
        app.sm = self
            .c
            .committed
            .range(..=at)
            .map(|(&i, &t)| LogId::new(t, i))
            .collect();
        self.observe(id);
    }

    fn assert_same_state_machines(&self) {
        let ids = self.up();
        let first = &self.apps[&ids[0]].sm;
        let expected: Vec<Index> = (1..=first.len() as Index).collect();
        let got: Vec<Index> = first.iter().map(|l| l.index).collect();
        assert_eq!(got, expected, "state machine of {} has gaps", ids[0]);
        for id in ids {
            assert_eq!(
                &self.apps[&id].sm, first,
                "state machine of node {id} differs"
            );
        }
    }
}
