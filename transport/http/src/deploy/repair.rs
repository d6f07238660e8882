//! `esim repair`: find the first damage in a data dir's journal and tell what cutting
//! there drops; with `cut_at_damage`, cut it.

use crate::journal::{self, DamageReport, KeptEntry};
use std::path::PathBuf;

/// What `esim repair` is told.
#[derive(Clone, Debug)]
pub struct RepairOptions {
    /// The data dir (refused while a running process holds it).
    pub data_dir: PathBuf,
    /// Cut the damaged segment at the damage and remove every later segment; without it
    /// nothing is changed.
    pub cut_at_damage: bool,
}

fn describe(kept: Option<KeptEntry>) -> String {
    match kept {
        Some(entry) => format!("index {} at {}", entry.index, entry.at.to_rfc3339()),
        None => "none (no entry is left)".into(),
    }
}

/// `esim repair`. Exit status: success when the data dir is clean (torn tails aside) or
/// was cut.
pub fn repair(options: RepairOptions) -> Result<(), String> {
    let applied = options.cut_at_damage;
    let report = journal::repair(&options.data_dir, applied).map_err(|e| e.to_string())?;
    for warning in &report.warnings {
        println!("warning          {warning}");
    }
    for note in &report.torn_tails {
        let what = if applied { "cut here" } else { "not damage: `esim serve` cuts it on start" };
        println!("torn tail        {note} ({what})");
    }
    let Some(damage) = report.damage else {
        println!("clean            no damage in {}", options.data_dir.display());
        println!("entries          {}", report.entries_kept);
        println!("last entry       {}", describe(report.last_kept));
        return Ok(());
    };
    print_damage(&damage);
    println!("last entry kept  {}", describe(report.last_kept));
    println!("entries kept     {}", report.entries_kept);
    if applied {
        println!("result           cut: the data dir starts cleanly now; the manifest lists the segments left");
        Ok(())
    } else {
        println!("result           nothing changed");
        Err(format!(
            "the journal in {} is damaged; `esim repair --data-dir {} --cut-at-damage` drops what is listed above \
             (or restore the data dir from a backup)",
            options.data_dir.display(),
            options.data_dir.display()
        ))
    }
}

/// The damage found and what cutting there drops.
fn print_damage(damage: &DamageReport) {
    println!("damage           {}", damage.message);
    if damage.gap {
        println!(
            "cut              nothing in {} (missing, or cut short): the entries missing there are gone and cannot be counted",
            damage.file.display()
        );
    } else if damage.whole_segment {
        println!("cut              {} (the whole file: its header is damaged)", damage.file.display());
    } else {
        println!("cut              {} at byte offset {}", damage.file.display(), damage.offset);
    }
    for segment in &damage.later_segments {
        println!("later segment    {} (removed whole)", segment.display());
    }
    println!(
        "dropped entries  {} ({} readable, {} unreadable stretch(es) counted as one entry each)",
        damage.dropped_entries + damage.unreadable_stretches,
        damage.dropped_entries,
        damage.unreadable_stretches
    );
    println!("dropped bytes    {}", damage.dropped_bytes);
}
