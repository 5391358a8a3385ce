//! A description of the machine a report was measured on, for the JSON output.

use std::ffi::CStr;
use std::fs;

use serde::{Deserialize, Serialize};

/// What the numbers in a [`crate::Report`] depend on besides the code.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo`, or `"unknown"`.
    pub cpu_model: String,
    /// Logical CPUs (`processor` entries in `/proc/cpuinfo`).
    pub logical_cpus: usize,
    /// CPUs this process may run on (affinity and cgroup limits applied).
    pub available_cpus: usize,
    /// `uname -s -r -v`.
    pub kernel: String,
    /// `uname -m`.
    pub arch: String,
    /// `uname -n`.
    pub hostname: String,
    /// `MemTotal` from `/proc/meminfo`, in bytes (0 if unreadable).
    pub memory_bytes: u64,
    /// The 1, 5 and 15 minute load averages from `/proc/loadavg` when the suite ended
    /// (the benchmark's own threads included; empty if unreadable or in a report
    /// written before they were recorded): how busy the machine was.
    #[serde(default)]
    pub load_average: Vec<f64>,
}

impl Machine {
    /// Reads the description from `/proc` and `uname(2)`. Never fails: a field that
    /// cannot be read says so, since a missing description must not lose a run.
    pub fn detect() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let loadavg = fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let uts = Uname::get();
        Self {
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            logical_cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            available_cpus: std::thread::available_parallelism().map_or(0, usize::from),
            kernel: format!("{} {} {}", uts.sysname, uts.release, uts.version),
            arch: uts.machine,
            hostname: uts.nodename,
            memory_bytes: mem_total(&meminfo).unwrap_or(0),
            load_average: load_average(&loadavg),
        }
    }
}

/// The first `model name` line's value (x86; other architectures spell it otherwise).
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| matches!(k.trim(), "model name" | "Model" | "cpu model"))
        .map(|(_, v)| v.trim().to_string())
}

/// `MemTotal:  24683520 kB` in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `0.52 0.58 0.59 1/467 12345` -> the three averages (none if malformed).
fn load_average(loadavg: &str) -> Vec<f64> {
    let values: Option<Vec<f64>> = loadavg
        .split_whitespace()
        .take(3)
        .map(|v| v.parse().ok())
        .collect();
    values.filter(|v| v.len() == 3).unwrap_or_default()
}

struct Uname {
    sysname: String,
    nodename: String,
    release: String,
    version: String,
    machine: String,
}

impl Uname {
    fn get() -> Self {
        // SAFETY: utsname is plain old data (arrays of c_char); all zeroes is valid.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `uts` is a valid, writable utsname.
        let ok = unsafe { libc::uname(&mut uts) } == 0;
        let field = |f: &[libc::c_char]| -> String {
            if !ok {
                return "unknown".into();
            }
            // SAFETY: c_char and u8 have the same size and alignment.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(f.as_ptr().cast(), f.len()) };
            CStr::from_bytes_until_nul(bytes)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "unknown".into())
        };
        Self {
            sysname: field(&uts.sysname),
            nodename: field(&uts.nodename),
            release: field(&uts.release),
            version: field(&uts.version),
            machine: field(&uts.machine),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpuinfo_and_meminfo() {
        let cpu = "processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\nflags\t: fpu\n";
        assert_eq!(cpu_model(cpu).as_deref(), Some("Example CPU @ 2.0GHz"));
        assert_eq!(
            mem_total("MemTotal:       1024 kB\nMemFree: 1 kB\n"),
            Some(1024 * 1024)
        );
        assert_eq!(
            load_average("0.52 1.58 2.00 1/467 12345\n"),
            [0.52, 1.58, 2.0]
        );
        assert!(load_average("garbage").is_empty());
    }

    #[test]
    fn detects_this_machine() {
        let m = Machine::detect();
        assert!(m.available_cpus >= 1);
        assert!(m.kernel.starts_with("Linux"), "{}", m.kernel);
    }
}
