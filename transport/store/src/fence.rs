//! The fencing rules of a shard's journal, in one place for every store (issue 17).
//!
//! A shard has one owner row: the owner's `epoch` and the journal `head` (entries
//! appended: the index the next entry gets). These functions are the rules both stores
//! follow; [`crate::store_pg`] states [`append`] as the `WHERE` of its conditional
//! `UPDATE` (the database evaluates it inside the append's transaction) and calls
//! [`committed`] and [`still_owns`] itself; [`crate::store_mem`] calls all of them.
//! Safety comes from these compares, never from lease timing: the lease only decides
//! when a standby may try ([`may_take_over`]).

/// What the fencing rules see of a shard's owner row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerRow {
    pub epoch: i64,
    pub head: u64,
}

/// What an append at `(epoch, expected_head)` may do to the owner row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Append {
    /// The row has this epoch and this head: the batch goes in at `expected_head`, and
    /// the head moves past it in the same transaction.
    Commit,
    /// The conditional update would touch no row: another process took the shard (a
    /// newer epoch), or the head moved without this process. It must acknowledge
    /// nothing more for the shard.
    Fenced,
}

/// The append rule: `UPDATE … WHERE epoch = mine AND head = expected` must touch
/// exactly one row.
pub fn append(row: Option<OwnerRow>, my_epoch: i64, expected_head: u64) -> Append {
    match row {
        Some(row) if row.epoch == my_epoch && row.head == expected_head => Append::Commit,
        _ => Append::Fenced,
    }
}

/// The resolution of a commit whose outcome is unknown, read back once the old
/// session's outcome is final: the batch committed exactly when the journal row at its
/// first index exists and was written by this epoch (`row_epoch_at_first`). A row of
/// another epoch there means another owner appended at that index: not ours.
pub fn committed(row_epoch_at_first: Option<i64>, my_epoch: i64) -> bool {
    row_epoch_at_first == Some(my_epoch)
}

/// Whether appends may go on after a failed one: the shard is still this epoch's and
/// its head is the one this process acknowledged (anything else: the shard moved on).
pub fn still_owns(row: Option<OwnerRow>, my_epoch: i64, my_head: u64) -> bool {
    row == Some(OwnerRow { epoch: my_epoch, head: my_head })
}

/// The takeover rule of a standby that saw `seen_epoch`: the row still has that epoch
/// and its lease ended strictly before `now_ms` (`lease_until < now()`), by the store's
/// clock. The winner sets epoch `seen_epoch + 1`.
pub fn may_take_over(row_epoch: i64, seen_epoch: i64, lease_until_ms: i64, now_ms: i64) -> bool {
    row_epoch == seen_epoch && lease_until_ms < now_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_commits_only_at_its_epoch_and_head() {
        let row = Some(OwnerRow { epoch: 3, head: 10 });
        assert_eq!(append(row, 3, 10), Append::Commit);
        assert_eq!(append(row, 2, 10), Append::Fenced, "an older epoch (a zombie)");
        assert_eq!(append(row, 3, 9), Append::Fenced, "a head that moved");
        assert_eq!(append(None, 3, 10), Append::Fenced, "no owner row");
        assert!(committed(Some(3), 3));
        assert!(!committed(Some(4), 3) && !committed(None, 3));
        assert!(still_owns(row, 3, 10) && !still_owns(row, 3, 11) && !still_owns(row, 4, 10));
        assert!(may_take_over(3, 3, 99, 100));
        assert!(!may_take_over(3, 3, 100, 100), "the lease ends strictly before now");
        assert!(!may_take_over(4, 3, 0, 100), "another standby won");
    }
}
