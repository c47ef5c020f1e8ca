//! pcap files: the `pcap trace rx tx drop ...` dispatch capture and a streaming writer used by
//! drivers (e.g. `packet-generator capture`). Files are standard libpcap (microsecond,
//! Ethernet link type) readable by tcpdump and Wireshark.
//!
//! Every capture file goes to one directory, [`CaptureDir`] (`unix { capture-dir }`, `/tmp`
//! by default as VPP): a CLI name is a file name or an absolute path directly in it; other
//! paths and `..` are refused with an error saying where files may go. Files are created
//! owner-only under a fresh name and renamed over the target
//! ([`sluice_infra::files::OutputDir::create`]): an existing file or a symlink at the name is
//! replaced, never written through.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use sluice_infra::files::{FileError, OutputDir};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Capture points of `pcap trace`.
pub mod point {
    /// Packets as received by input nodes.
    pub const RX: u8 = 1;
    /// Packets as handed to interface output.
    pub const TX: u8 = 2;
    /// Packets dropped by `error-drop`.
    pub const DROP: u8 = 4;
}

/// A pcap file being written.
pub struct PcapSink {
    // Unbuffered: every packet reaches the file at once, so a capture is always complete on
    // disk (captures are a debugging path, not a fast path).
    w: PcapWriter<File>,
    /// Packets written so far.
    pub written: u64,
    path: PathBuf,
}

/// The directory capture files are written to (a `Vlib` extension set by the daemon from
/// `unix { capture-dir }`; `/tmp` when unset).
#[derive(Clone, Debug, Default)]
pub struct CaptureDir(pub OutputDir);

/// Why a capture file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The name or the file system refused.
    #[error(transparent)]
    File(#[from] FileError),
    /// Writing the pcap header failed.
    #[error("cannot write `{path}': {source}")]
    Header {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl PcapSink {
    /// Creates the capture file `name` in `dir` (see the module doc) and writes the pcap
    /// file header.
    pub fn create_in(dir: &OutputDir, name: &str, snaplen: u32) -> Result<PcapSink, CaptureError> {
        PcapSink::create_in_linktype(dir, name, snaplen, DataLink::ETHERNET)
    }

    /// [`PcapSink::create_in`] with another link type (VPP's dispatch trace: 280).
    pub fn create_in_linktype(
        dir: &OutputDir,
        name: &str,
        snaplen: u32,
        datalink: DataLink,
    ) -> Result<PcapSink, CaptureError> {
        let (f, path) = dir.create(name)?;
        PcapSink::with_file(f, &path, snaplen, datalink).map_err(|source| CaptureError::Header {
            path: path.clone(),
            source,
        })
    }

    /// Creates (truncates) `path` and writes the pcap file header. Not confined: for tests
    /// and tools; CLI paths go through [`PcapSink::create_in`].
    pub fn create(path: &Path, snaplen: u32) -> std::io::Result<PcapSink> {
        PcapSink::with_file(File::create(path)?, path, snaplen, DataLink::ETHERNET)
    }

    fn with_file(
        f: File,
        path: &Path,
        snaplen: u32,
        datalink: DataLink,
    ) -> std::io::Result<PcapSink> {
        let hdr = PcapHeader {
            snaplen,
            datalink,
            ..Default::default()
        };
        let w = PcapWriter::with_header(f, hdr).map_err(std::io::Error::other)?;
        Ok(PcapSink {
            w,
            written: 0,
            path: path.to_path_buf(),
        })
    }

    /// Appends one packet (`orig_len` is its length before truncation).
    pub fn write(&mut self, ts_secs: f64, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        let ts = Duration::from_secs_f64(ts_secs.max(0.0));
        self.w
            .write_packet(&PcapPacket::new(ts, orig_len, data))
            .map_err(std::io::Error::other)?;
        self.written += 1;
        Ok(())
    }

    /// Flushes written packets to the file (a no-op: writes are unbuffered).
    pub fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Settings of `pcap trace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapTraceConfig {
    /// Capture points ([`point`] bits).
    pub points: u8,
    /// Stop after this many packets.
    pub max: u64,
    /// Bytes kept per packet.
    pub max_bytes_per_pkt: u32,
    /// Only packets received on / sent to this interface.
    pub intfc: Option<u32>,
    /// Output file name (a name in, or a path directly inside, the capture directory).
    pub file: String,
}

struct PcapTraceState {
    cfg: PcapTraceConfig,
    sink: Option<PcapSink>,
    error: Option<String>,
}

/// `pcap trace` state shared by every thread.
#[derive(Default)]
pub struct PcapTrace {
    /// Enabled capture points: checked once per frame by the capturing nodes.
    pub points: AtomicU8,
    state: Mutex<Option<PcapTraceState>>,
}

impl PcapTrace {
    /// Starts a capture into `dir`, replacing any running one.
    pub fn start(&self, dir: &OutputDir, cfg: PcapTraceConfig) -> Result<(), CaptureError> {
        // The file's snaplen stays 65535 (some readers reject orig_len > snaplen); packets are
        // truncated to max_bytes_per_pkt when written.
        let sink = PcapSink::create_in(dir, &cfg.file, 65535)?;
        let mut st = self.lock();
        self.points.store(cfg.points, Ordering::Release);
        *st = Some(PcapTraceState {
            cfg,
            sink: Some(sink),
            error: None,
        });
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PcapTraceState>> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Stops the capture and closes the file. Returns a status line.
    pub fn stop(&self) -> String {
        self.points.store(0, Ordering::Release);
        let mut st = self.lock();
        match st.as_mut() {
            None => "pcap capture not enabled".to_string(),
            Some(s) => {
                let mut msg = String::new();
                if let Some(mut sink) = s.sink.take() {
                    let _ = sink.flush();
                    msg = format!(
                        "Write {} packets to {}, and stop capture...",
                        sink.written,
                        sink.path().display()
                    );
                } else if let Some(e) = &s.error {
                    msg = format!("capture stopped: {e}");
                } else {
                    msg.push_str("capture already complete");
                }
                msg
            }
        }
    }

    /// `pcap trace status`.
    pub fn status(&self) -> String {
        let st = self.lock();
        match st.as_ref() {
            Some(PcapTraceState {
                cfg,
                sink: Some(sink),
                ..
            }) => {
                let mut pts = Vec::new();
                if cfg.points & point::RX != 0 {
                    pts.push("rx");
                }
                if cfg.points & point::TX != 0 {
                    pts.push("tx");
                }
                if cfg.points & point::DROP != 0 {
                    pts.push("drop");
                }
                format!(
                    "pcap {} capture on, {} of {} packets captured to {}",
                    pts.join(" "),
                    sink.written,
                    cfg.max,
                    sink.path().display()
                )
            }
            Some(PcapTraceState { sink: None, .. }) => {
                "pcap capture complete (file closed)".to_string()
            }
            None => "pcap capture is off".to_string(),
        }
    }

    /// Captures packets at one point. `packets` yields (interface, ts, bytes, orig_len). Called
    /// by nodes only when `points` has their bit, once per frame.
    pub fn capture<'a>(&self, pt: u8, packets: impl Iterator<Item = (u32, f64, &'a [u8], u32)>) {
        let mut st = self.lock();
        let Some(s) = st.as_mut() else { return };
        if s.cfg.points & pt == 0 {
            return;
        }
        let Some(sink) = s.sink.as_mut() else { return };
        for (intf, ts, bytes, orig) in packets {
            if s.cfg.intfc.is_some_and(|i| i != intf) {
                continue;
            }
            let keep = bytes.len().min(s.cfg.max_bytes_per_pkt as usize);
            if let Err(e) = sink.write(ts, &bytes[..keep], orig) {
                s.error = Some(e.to_string());
                s.sink = None;
                self.points.store(0, Ordering::Release);
                return;
            }
            if sink.written >= s.cfg.max {
                let _ = sink.flush();
                s.sink = None;
                self.points.store(0, Ordering::Release);
                return;
            }
        }
    }
}
