//! Lanes: the per-CPU partitions of the pool. A thread works in the lane of the CPU it
//! runs on, so threads on different CPUs take different locks. In a pool that spans
//! several NUMA nodes the lane is one of the thread's node's lanes (the node of its
//! CPU), so what it allocates lands in its node's memory first.

use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// A lane this thread was told to use instead of its CPU's (see [`pin`]).
    static PINNED: Cell<Option<u32>> = const { Cell::new(None) };
    /// A node this thread was told it runs on (see [`pin_node`]).
    static NODE: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The lane for the calling thread in a pool of `lanes` lanes over `nodes` nodes (a
/// divisor of `lanes`): the lane it was pinned to, else one of its node's lanes
/// picked by its CPU.
pub fn current(lanes: u32, nodes: u32) -> u32 {
    let lanes = lanes.max(1);
    if let Some(l) = PINNED.with(Cell::get) {
        return l % lanes;
    }
    let cpu = current_cpu();
    let nodes = nodes.clamp(1, lanes);
    let per_node = lanes / nodes;
    // One node: no topology to look at (the lane is the CPU's, as it always was).
    let node = if nodes > 1 {
        node_of_cpu(cpu) % nodes
    } else {
        0
    };
    node * per_node + cpu % per_node
}

/// The CPU the calling thread runs on (0 if the kernel does not say).
fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's CPU.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(0)
}

/// The NUMA node the calling thread counts as running on: the one it was pinned to
/// ([`pin_node`]), else its CPU's.
fn node_of_cpu(cpu: u32) -> u32 {
    NODE.with(Cell::get)
        .unwrap_or_else(|| topology().get(cpu as usize).copied().unwrap_or(0))
}

/// Every lane of a pool of `lanes` lanes over `nodes` nodes once, in the order a thread
/// working in `lane` takes from them: its own lane, then the other lanes of its node,
/// then the next node's (starting at the same place in that node), and so on. With one
/// node it is `lane, lane+1, …` round the pool.
pub(crate) fn order(lane: u32, lanes: u32, nodes: u32) -> impl Iterator<Item = usize> {
    let lanes = lanes.max(1);
    let nodes = nodes.clamp(1, lanes);
    let per = lanes / nodes;
    let (node, at) = ((lane % lanes) / per, lane % per);
    (0..lanes).map(move |i| {
        let k = (node + i / per) % nodes;
        (k * per + (at + i) % per) as usize
    })
}

/// Make the calling thread work in `lane` whatever CPU it runs on (`None`: its CPU's
/// again). The crash checker uses it to put operations on chosen lanes; any lane is
/// correct, the CPU's is only the fastest.
pub fn pin(lane: Option<u32>) {
    PINNED.with(|p| p.set(lane));
}

/// Make the calling thread count as running on NUMA node `node` whatever its CPU's
/// node is (`None`: its CPU's again): a simulated topology, for testing placement on
/// a machine with one node. A [`pin`]ned lane still wins.
pub fn pin_node(node: Option<u32>) {
    NODE.with(|n| n.set(node));
}

/// The machine's NUMA nodes (1 where the kernel shows none): the default node count
/// of a new pool.
pub fn machine_nodes() -> u32 {
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    let count: usize = parse_cpulist(&online).len();
    (count.max(1) as u32).min(crate::format::layout::MAX_NODES)
}

/// The node of each CPU, indexed by CPU number, read once from
/// /sys/devices/system/node/nodeK/cpulist. Nodes count from 0 in the order of their
/// numbers (so nodes 0 and 2 of a machine are 0 and 1 here); CPUs no node lists are on
/// node 0.
fn topology() -> &'static [u32] {
    static MAP: OnceLock<Vec<u32>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut nodes: Vec<(u32, Vec<u32>)> = std::fs::read_dir("/sys/devices/system/node")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let node = name.to_str()?.strip_prefix("node")?.parse::<u32>().ok()?;
                let list = std::fs::read_to_string(entry.path().join("cpulist")).ok()?;
                Some((node, parse_cpulist(&list)))
            })
            .collect();
        nodes.sort();
        cpu_map(&nodes)
    })
}

/// The node rank of each CPU given each node's CPUs, in node order.
fn cpu_map(nodes: &[(u32, Vec<u32>)]) -> Vec<u32> {
    let mut map = Vec::new();
    for (rank, (_, cpus)) in nodes.iter().enumerate() {
        for &cpu in cpus {
            if map.len() <= cpu as usize {
                map.resize(cpu as usize + 1, 0);
            }
            map[cpu as usize] = rank as u32;
        }
    }
    map
}

/// The numbers of a kernel list such as `0-3,8,10-11` (what does not parse is left out,
/// and so are numbers above 4096, more than any machine's CPUs or nodes).
fn parse_cpulist(s: &str) -> Vec<u32> {
    const MAX: u32 = 4096;
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) else {
            continue;
        };
        out.extend(a..=b.min(MAX));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("0\n"), vec![0]);
        assert_eq!(parse_cpulist(""), Vec::<u32>::new());
        assert_eq!(parse_cpulist("x,2"), vec![2]);
        assert_eq!(parse_cpulist("0-4294967295").len(), 4097);
    }

    #[test]
    fn this_machine_s_cpus_are_on_its_nodes() {
        let nodes = machine_nodes();
        assert!(topology().iter().all(|&n| n < nodes), "{:?}", topology());
    }

    #[test]
    fn cpus_map_to_node_ranks() {
        let nodes = [(0, vec![0, 1, 4]), (2, vec![2, 3])];
        assert_eq!(cpu_map(&nodes), vec![0, 0, 1, 1, 0]);
        assert!(cpu_map(&[]).is_empty());
    }

    #[test]
    fn lanes_are_taken_from_the_own_node_first() {
        let o = |lane, lanes, nodes| order(lane, lanes, nodes).collect::<Vec<_>>();
        assert_eq!(o(2, 4, 1), vec![2, 3, 0, 1]);
        assert_eq!(o(1, 4, 2), vec![1, 0, 3, 2]);
        assert_eq!(o(5, 6, 3), vec![5, 4, 1, 0, 3, 2]);
        assert_eq!(o(0, 2, 2), vec![0, 1]);
        assert_eq!(o(9, 4, 2), vec![1, 0, 3, 2], "lane folded onto the pool");
    }

    #[test]
    fn a_thread_on_a_simulated_node_works_in_that_node_s_lanes() {
        for node in 0..4 {
            pin_node(Some(node));
            let lane = current(8, 4);
            assert_eq!(lane / 2, node, "lane {lane} for node {node}");
            // More nodes than the pool has: folded onto the pool's.
            assert_eq!(current(8, 2) / 4, node % 2);
        }
        pin_node(None);
        pin(Some(5));
        pin_node(Some(0));
        assert_eq!(current(8, 4), 5, "a pinned lane wins");
        pin(None);
        pin_node(None);
        assert!(current(8, 1) < 8);
    }
}
