//! Graph construction: [`GraphBuilder`] collects registrations, resolves next arcs by name and
//! produces the [`Registry`] shared by every thread's graph instance.

use crate::node::{CounterDesc, Factory, NodeIndex, NodeKind, NodeRegistration};
use crate::stats::NodeStats;
use std::collections::HashMap;
use std::sync::Arc;

/// Errors building or changing the graph. Each names the nodes involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Two registrations use one name.
    #[error("duplicate node name `{0}'")]
    DuplicateNode(String),
    /// A next arc names a node that does not exist.
    #[error("node `{node}': unknown next node `{next}'")]
    UnknownNext {
        /// Node owning the arc.
        node: String,
        /// Missing target.
        next: String,
    },
    /// A node name was not found.
    #[error("unknown node `{0}'")]
    UnknownNode(String),
    /// Feature ordering constraints form a cycle.
    #[error("feature order cycle on arc `{arc}': {}", cycle.join(" -> "))]
    FeatureCycle {
        /// Arc name.
        arc: String,
        /// Nodes on the cycle, first repeated at the end.
        cycle: Vec<String>,
    },
    /// Too many counters in the graph for the 16-bit error code.
    #[error("too many node counters (node `{0}')")]
    TooManyCounters(String),
    /// A topology change ([`crate::Vlib::add_node`], [`crate::Vlib::add_next`]) that
    /// worker threads did not take within [`crate::Vlib::thread_wait`] (`wait`): the
    /// registry has it, those threads have it queued and take it when they get to it, but
    /// until then a frame sent on the new node or arc would be dropped there.
    #[error("thread(s) {} did not take the graph change within {} s: they take it when they answer", list(.threads), .wait.as_secs_f64())]
    NotTaken {
        /// The late threads, by index.
        threads: Vec<usize>,
        /// How long each was waited for.
        wait: std::time::Duration,
    },
}

fn list(threads: &[usize]) -> String {
    let t: Vec<String> = threads.iter().map(|t| t.to_string()).collect();
    t.join(", ")
}

/// Everything the graph knows about one node.
pub struct NodeInfo {
    /// Index.
    pub index: NodeIndex,
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: NodeKind,
    /// Next arc names, in arc order.
    pub next_names: Vec<String>,
    /// Resolved next arcs.
    pub nexts: Vec<NodeIndex>,
    /// Counters.
    pub counters: Vec<CounterDesc>,
    /// Graph-wide error code of counter 0.
    pub error_base: u16,
    /// Runtime statistics and counters, one slot per thread.
    pub stats: Arc<NodeStats>,
    /// Builds per-thread instances.
    pub factory: Arc<Factory>,
    /// Instantiated on worker threads too.
    pub on_workers: bool,
}

/// What a thread needs to instantiate one node.
#[derive(Clone)]
pub struct NodeSnapshot {
    /// Index.
    pub index: NodeIndex,
    /// Kind.
    pub kind: NodeKind,
    /// Resolved next arcs.
    pub nexts: Vec<NodeIndex>,
    /// Statistics.
    pub stats: Arc<NodeStats>,
    /// Error code of counter 0.
    pub error_base: u16,
    /// Instance factory.
    pub factory: Arc<Factory>,
    /// Instantiated on workers.
    pub on_workers: bool,
    /// The graph-wide error table at the time of the snapshot.
    pub err_map: Vec<(NodeIndex, u16)>,
}

/// Collects node registrations.
#[derive(Default)]
pub struct GraphBuilder {
    regs: Vec<NodeRegistration>,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a node. Name clashes are reported by [`GraphBuilder::build`].
    pub fn register(&mut self, reg: NodeRegistration) {
        self.regs.push(reg);
    }

    /// Whether a node of that name was registered.
    pub fn has(&self, name: &str) -> bool {
        self.regs.iter().any(|r| r.name == name)
    }

    /// Resolves every next arc and allocates statistics for `n_threads` threads.
    pub fn build(self, n_threads: usize) -> Result<Registry, GraphError> {
        let mut reg = Registry {
            nodes: Vec::new(),
            by_name: HashMap::new(),
            errors: Vec::new(),
            n_threads,
        };
        for r in self.regs {
            reg.insert(r)?;
        }
        for i in 0..reg.nodes.len() {
            let names = reg.nodes[i].next_names.clone();
            let mut nexts = Vec::with_capacity(names.len());
            for n in &names {
                match reg.by_name.get(n) {
                    Some(&t) => nexts.push(t),
                    None => {
                        return Err(GraphError::UnknownNext {
                            node: reg.nodes[i].name.clone(),
                            next: n.clone(),
                        })
                    }
                }
            }
            reg.nodes[i].nexts = nexts;
        }
        Ok(reg)
    }
}

/// The resolved graph: node table, name index and the graph-wide error-code table.
pub struct Registry {
    nodes: Vec<NodeInfo>,
    by_name: HashMap<String, NodeIndex>,
    errors: Vec<(NodeIndex, u16)>,
    n_threads: usize,
}

impl Registry {
    fn insert(&mut self, r: NodeRegistration) -> Result<NodeIndex, GraphError> {
        if self.by_name.contains_key(&r.name) {
            return Err(GraphError::DuplicateNode(r.name));
        }
        let index = NodeIndex(self.nodes.len() as u32);
        let base = self.errors.len();
        if base + r.counters.len() > u16::MAX as usize {
            return Err(GraphError::TooManyCounters(r.name));
        }
        for l in 0..r.counters.len() {
            self.errors.push((index, l as u16));
        }
        self.by_name.insert(r.name.clone(), index);
        self.nodes.push(NodeInfo {
            index,
            stats: Arc::new(NodeStats::new(self.n_threads, r.counters.len())),
            name: r.name,
            kind: r.kind,
            next_names: r.next_nodes,
            nexts: Vec::new(),
            counters: r.counters,
            error_base: base as u16,
            factory: Arc::new(r.factory),
            on_workers: r.on_workers,
        });
        Ok(index)
    }

    /// Adds a node after the graph was built (its arcs must name existing nodes). The caller
    /// instantiates it on every thread ([`crate::Vlib::add_node`] does).
    pub fn add_node(&mut self, r: NodeRegistration) -> Result<NodeIndex, GraphError> {
        for n in &r.next_nodes {
            if !self.by_name.contains_key(n) {
                return Err(GraphError::UnknownNext {
                    node: r.name.clone(),
                    next: n.clone(),
                });
            }
        }
        let idx = self.insert(r)?;
        let nexts = self.nodes[idx.0 as usize]
            .next_names
            .iter()
            .map(|n| self.by_name[n])
            .collect();
        self.nodes[idx.0 as usize].nexts = nexts;
        Ok(idx)
    }

    /// Adds (or finds) the arc `from -> to`, returning its index.
    pub fn add_next(&mut self, from: NodeIndex, to: NodeIndex) -> Result<crate::Next, GraphError> {
        let to_name = self
            .nodes
            .get(to.0 as usize)
            .map(|n| n.name.clone())
            .ok_or_else(|| GraphError::UnknownNode(format!("#{}", to.0)))?;
        let node = self
            .nodes
            .get_mut(from.0 as usize)
            .ok_or_else(|| GraphError::UnknownNode(format!("#{}", from.0)))?;
        if let Some(i) = node.nexts.iter().position(|&n| n == to) {
            return Ok(crate::Next(i as u16));
        }
        node.nexts.push(to);
        node.next_names.push(to_name);
        Ok(crate::Next((node.nexts.len() - 1) as u16))
    }

    /// What a thread needs to instantiate node `i`.
    pub fn snapshot(&self, i: NodeIndex) -> NodeSnapshot {
        let n = self.node(i);
        NodeSnapshot {
            index: i,
            kind: n.kind,
            nexts: n.nexts.clone(),
            stats: n.stats.clone(),
            error_base: n.error_base,
            factory: n.factory.clone(),
            on_workers: n.on_workers,
            err_map: self.errors.clone(),
        }
    }

    /// Looks a node up by name.
    pub fn find(&self, name: &str) -> Option<NodeIndex> {
        self.by_name.get(name).copied()
    }

    /// Looks a node up by name, as a [`GraphError`] naming it when missing.
    pub fn lookup(&self, name: &str) -> Result<NodeIndex, GraphError> {
        self.find(name)
            .ok_or_else(|| GraphError::UnknownNode(name.to_string()))
    }

    /// A node's information.
    pub fn node(&self, i: NodeIndex) -> &NodeInfo {
        &self.nodes[i.0 as usize]
    }

    /// All nodes in index order.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Number of threads statistics are kept for.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// The graph-wide error-code table: code -> (node, local counter).
    pub fn error_table(&self) -> &[(NodeIndex, u16)] {
        &self.errors
    }

    /// Node and counter of a graph-wide error code.
    pub fn error_of(&self, code: u16) -> Option<(NodeIndex, u16)> {
        self.errors.get(code as usize).copied()
    }
}

/// One feature of an arc with its ordering constraints (docs/architecture.md, "Feature arcs").
#[derive(Clone, Debug)]
pub struct FeatureOrder {
    /// Feature node name.
    pub name: String,
    /// Features this one must run before.
    pub runs_before: Vec<String>,
    /// Features this one must run after.
    pub runs_after: Vec<String>,
}

/// Orders the features of an arc so every `runs_before`/`runs_after` constraint holds; ties
/// keep registration order. A cycle is an error naming the nodes on it.
pub fn order_features(arc: &str, feats: &[FeatureOrder]) -> Result<Vec<String>, GraphError> {
    let n = feats.len();
    let idx: HashMap<&str, usize> = feats
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name.as_str(), i))
        .collect();
    // edges[a] contains b when a must run before b.
    let mut edges = vec![Vec::new(); n];
    for (i, f) in feats.iter().enumerate() {
        for b in &f.runs_before {
            if let Some(&j) = idx.get(b.as_str()) {
                edges[i].push(j);
            }
        }
        for a in &f.runs_after {
            if let Some(&j) = idx.get(a.as_str()) {
                edges[j].push(i);
            }
        }
    }
    let mut indeg = vec![0usize; n];
    for e in &edges {
        for &j in e {
            indeg[j] += 1;
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut done = vec![false; n];
    while out.len() < n {
        // Lowest registration index with no remaining predecessor: stable order.
        let Some(i) = (0..n).find(|&i| !done[i] && indeg[i] == 0) else {
            return Err(GraphError::FeatureCycle {
                arc: arc.to_string(),
                cycle: find_cycle(&edges, &done)
                    .into_iter()
                    .map(|i| feats[i].name.clone())
                    .collect(),
            });
        };
        done[i] = true;
        out.push(feats[i].name.clone());
        for &j in &edges[i] {
            indeg[j] -= 1;
        }
    }
    Ok(out)
}

fn find_cycle(edges: &[Vec<usize>], done: &[bool]) -> Vec<usize> {
    // Every remaining node has a remaining predecessor (its in-degree is not zero), so walking
    // predecessors from any remaining node must revisit a node: that loop is a cycle.
    let n = edges.len();
    let mut preds = vec![Vec::new(); n];
    for (a, e) in edges.iter().enumerate() {
        for &b in e {
            if !done[a] {
                preds[b].push(a);
            }
        }
    }
    let start = (0..n).find(|&i| !done[i]).unwrap_or(0);
    let mut path = vec![start];
    let mut seen = vec![usize::MAX; n];
    seen[start] = 0;
    let mut cur = start;
    while let Some(&p) = preds[cur].first() {
        if seen[p] != usize::MAX {
            let mut cyc = path[seen[p]..].to_vec();
            cyc.push(p);
            cyc.reverse();
            return cyc;
        }
        seen[p] = path.len();
        path.push(p);
        cur = p;
    }
    path
}
