//! `esim repair`: find the first damage in a data dir's journal and tell what cutting
//! there drops; with `--cut-at-damage`, cut it.

use esim_transport::journal::{self, KeptEntry};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RepairArgs {
    /// The data dir of `esim serve` (refused while a running process holds it).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Cut the damaged segment at the damage offset and remove every later segment,
    /// dropping the entries listed (when entries are missing, a segment deleted or cut
    /// short, every segment after the gap is removed). Without it nothing is changed: the
    /// damage and what cutting would drop are only reported.
    #[arg(long)]
    pub cut_at_damage: bool,
}

fn describe(kept: Option<KeptEntry>) -> String {
    match kept {
        Some(entry) => format!("index {} at {}", entry.index, entry.at.to_rfc3339()),
        None => "none (no entry is left)".into(),
    }
}

/// Exit status: success when the data dir is clean (torn tails aside) or was cut.
pub fn run(args: RepairArgs) -> Result<(), String> {
    let applied = args.cut_at_damage;
    let report = journal::repair(&args.data_dir, applied).map_err(|e| e.to_string())?;
    for warning in &report.warnings {
        println!("warning          {warning}");
    }
    for note in &report.torn_tails {
        let what = if applied { "cut here" } else { "not damage: `esim serve` cuts it on start" };
        println!("torn tail        {note} ({what})");
    }
    let Some(damage) = report.damage else {
        println!("clean            no damage in {}", args.data_dir.display());
        println!("entries          {}", report.entries_kept);
        println!("last entry       {}", describe(report.last_kept));
        return Ok(());
    };
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
            args.data_dir.display(),
            args.data_dir.display()
        ))
    }
}
