//! What one node's `CLUSTER NODES` and `INFO` say.

use std::collections::BTreeMap;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The master's id, for a replica.
    pub(super) master: Option<String>,
    /// Owned slot ranges, inclusive; slots being imported or migrated
    /// (`[…]`) are left out.
    pub(super) slots: Vec<(u16, u16)>,
}

impl Entry {
    /// `ID IP:PORT@BUS[,HOSTNAME] FLAGS MASTER PING PONG EPOCH LINK SLOT…`
    pub(super) fn parse(line: &str) -> Option<Entry> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, address, flags, master, ..] = fields.as_slice() else {
            return None;
        };
        let host_port = address.split('@').next()?;
        let port = host_port.rsplit(':').next()?.parse().ok()?;
        let slots = fields
            .iter()
            .skip(8)
            .filter(|range| !range.starts_with('['))
            .filter_map(|range| match range.split_once('-') {
                Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
                None => {
                    let slot = range.parse().ok()?;
                    Some((slot, slot))
                }
            })
            .collect();
        Some(Entry {
            id: (*id).to_owned(),
            port,
            flags: flags.split(',').map(str::to_owned).collect(),
            master: (*master != "-").then(|| (*master).to_owned()),
            slots,
        })
    }

    pub(super) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub(super) fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    /// Neither failed, suspected (`fail?`), nor still being met.
    pub(super) fn is_working(&self) -> bool {
        !["fail", "fail?", "handshake", "noaddr"]
            .iter()
            .any(|flag| self.has_flag(flag))
    }

    pub(super) fn owns(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

/// One node's `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct View {
    pub(super) entries: Vec<Entry>,
}

impl View {
    pub(super) fn parse(text: &str) -> View {
        View {
            entries: text.lines().filter_map(Entry::parse).collect(),
        }
    }

    pub(super) fn entry(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    pub(super) fn myself(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.has_flag("myself"))
    }

    pub(super) fn working(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.is_working())
    }

    /// The working master that owns `slot`.
    pub(super) fn owner(&self, slot: u16) -> Option<&Entry> {
        self.working().find(|e| e.is_master() && e.owns(slot))
    }

    /// What every node must agree on: each working node's role, master and
    /// slots, by node id.
    pub(super) fn layout(&self) -> BTreeMap<&str, Placement<'_>> {
        self.working()
            .map(|e| {
                let placement = Placement {
                    is_master: e.is_master(),
                    master: e.master.as_deref(),
                    slots: &e.slots,
                };
                (e.id.as_str(), placement)
            })
            .collect()
    }
}

/// A node's place in the cluster, as one node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement<'a> {
    is_master: bool,
    master: Option<&'a str>,
    slots: &'a [(u16, u16)],
}

/// The value of `field:` in `INFO`-style text.
pub(super) fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}
