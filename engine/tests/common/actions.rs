//! Random command sequences for the determinism and property tests. An action names
//! accounts, eSIMs and groups by small indexes, resolved against what exists when it
//! runs, so any sequence is meaningful and shrinks well.
#![allow(dead_code)]

use super::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub enum Action {
    NewAccount,
    TopUp { account: u8, dollars: u16 },
    Provision { account: u8, group: Option<u8> },
    Install { esim: u8 },
    Fund { esim: u8, cents: u32 },
    Usage { esim: u8, mb: u32 },
    Defund { esim: u8 },
    Terminate { esim: u8 },
    Disable { esim: u8 },
    Enable { esim: u8 },
    CreateGroup { account: u8 },
    FundGroup { group: u8, cents: u32 },
    DefundGroup { group: u8 },
    AddToGroup { group: u8, esim: u8 },
    RemoveFromGroup { esim: u8 },
    AutoRefill { account: u8, card: u8 },
    Freeze { account: u8, frozen: bool },
    Webhook { account: u8 },
    DeliveryOutcome { pick: u8, status: u16 },
    Advance { seconds: u32 },
    Read { esim: u8 },
}

pub fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => Just(Action::NewAccount),
        2 => (any::<u8>(), 10u16..200).prop_map(|(account, dollars)| Action::TopUp { account, dollars }),
        4 => (any::<u8>(), proptest::option::of(any::<u8>())).prop_map(|(account, group)| Action::Provision { account, group }),
        3 => any::<u8>().prop_map(|esim| Action::Install { esim }),
        5 => (any::<u8>(), 1u32..5_000).prop_map(|(esim, cents)| Action::Fund { esim, cents }),
        6 => (any::<u8>(), 1u32..4_000).prop_map(|(esim, mb)| Action::Usage { esim, mb }),
        2 => any::<u8>().prop_map(|esim| Action::Defund { esim }),
        1 => any::<u8>().prop_map(|esim| Action::Terminate { esim }),
        1 => any::<u8>().prop_map(|esim| Action::Disable { esim }),
        1 => any::<u8>().prop_map(|esim| Action::Enable { esim }),
        1 => any::<u8>().prop_map(|account| Action::CreateGroup { account }),
        2 => (any::<u8>(), 1u32..5_000).prop_map(|(group, cents)| Action::FundGroup { group, cents }),
        1 => any::<u8>().prop_map(|group| Action::DefundGroup { group }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(group, esim)| Action::AddToGroup { group, esim }),
        1 => any::<u8>().prop_map(|esim| Action::RemoveFromGroup { esim }),
        1 => (any::<u8>(), 0u8..5).prop_map(|(account, card)| Action::AutoRefill { account, card }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(account, frozen)| Action::Freeze { account, frozen }),
        1 => any::<u8>().prop_map(|account| Action::Webhook { account }),
        2 => (any::<u8>(), prop_oneof![Just(200u16), Just(500u16)]).prop_map(|(pick, status)| Action::DeliveryOutcome { pick, status }),
        3 => (1u32..3_600).prop_map(|seconds| Action::Advance { seconds }),
        2 => any::<u8>().prop_map(|esim| Action::Read { esim }),
    ]
}

/// The world the actions run in: the harness plus what was created so far.
pub struct World {
    pub h: Harness,
    pub accounts: Vec<Reseller>,
    pub esims_of_account: Vec<(usize, String)>,
    pub groups: Vec<(usize, String)>,
    /// Every response, rendered (status and bytes), for determinism checks.
    pub transcript: Vec<(u16, Vec<u8>)>,
}

fn pick<T>(items: &[T], index: u8) -> Option<&T> {
    (!items.is_empty()).then(|| &items[index as usize % items.len()])
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut h =
            Harness::with_config(EngineConfig { seed, allow_insecure_webhooks: true, ..EngineConfig::default() });
        let first = h.reseller("100");
        World { h, accounts: vec![first], esims_of_account: vec![], groups: vec![], transcript: vec![] }
    }

    fn record(&mut self, response: Response) -> Response {
        self.transcript.push(render(&response));
        response
    }

    fn reseller(&mut self, account: usize, op: ResellerOp) -> Response {
        let key = self.accounts[account].api_key.clone();
        let request = ResellerRequest { key_digest: KeyDigest::of(&key), idempotency_key: None, op };
        let response = self.h.run(Command::Reseller(request));
        self.record(response)
    }

    pub fn apply(&mut self, action: &Action) {
        // Stay under the per-key rate limit: time moves a little with every action.
        self.h.advance_secs(1);
        let esim = |w: &World, i: u8| pick(&w.esims_of_account, i).cloned();
        match *action {
            Action::NewAccount => {
                if self.accounts.len() < 8 {
                    let r = self.h.reseller("50");
                    self.accounts.push(r);
                }
            }
            Action::TopUp { account, dollars } => {
                let id = pick(&self.accounts, account).unwrap().account_id.clone();
                let response = self.h.admin(AdminOp::TopUp { account_id: id, amount_usd: Decimal::from(dollars) });
                let _ = self.record(response);
            }
            Action::Provision { account, group } => {
                let account = account as usize % self.accounts.len();
                let group_id = group.and_then(|g| {
                    let mine: Vec<_> = self.groups.iter().filter(|(a, _)| *a == account).collect();
                    pick(&mine, g).map(|(_, id)| id.clone())
                });
                if let Ok(Reply::Provisioned(p)) =
                    self.reseller(account, ResellerOp::Provision { end_user_reference: None, label: None, group_id })
                {
                    self.esims_of_account.push((account, p.iccid));
                }
            }
            Action::Install { esim: i } => {
                if let Some((_, iccid)) = esim(self, i) {
                    let response = self.h.sandbox(SandboxOp::Install { iccid });
                    let _ = self.record(response);
                }
            }
            Action::Fund { esim: i, cents } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::Fund { iccid, amount: Decimal::new(cents.into(), 2) });
                }
            }
            Action::Usage { esim: i, mb } => {
                if let Some((_, iccid)) = esim(self, i) {
                    let response = self.h.sandbox(SandboxOp::Usage {
                        iccid,
                        mb: Decimal::from(mb),
                        country: "DE".into(),
                        operator: None,
                    });
                    let _ = self.record(response);
                }
            }
            Action::Defund { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::Defund { iccid });
                }
            }
            Action::Terminate { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::Terminate { iccid });
                }
            }
            Action::Disable { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::Disable { iccid });
                }
            }
            Action::Enable { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::Enable { iccid });
                }
            }
            Action::CreateGroup { account } => {
                let account = account as usize % self.accounts.len();
                let name = format!("g{}", self.groups.len());
                if let Ok(Reply::GroupCreated(g)) = self.reseller(
                    account,
                    ResellerOp::CreateGroup { name, low_balance_threshold_usd: None, refill_amount_usd: None },
                ) {
                    self.groups.push((account, g.id));
                }
            }
            Action::FundGroup { group, cents } => {
                if let Some((a, id)) = pick(&self.groups, group).cloned() {
                    let _ =
                        self.reseller(a, ResellerOp::FundGroup { group_id: id, amount: Decimal::new(cents.into(), 2) });
                }
            }
            Action::DefundGroup { group } => {
                if let Some((a, id)) = pick(&self.groups, group).cloned() {
                    let _ = self.reseller(a, ResellerOp::DefundGroup { group_id: id });
                }
            }
            Action::AddToGroup { group, esim: i } => {
                if let (Some((a, id)), Some((_, iccid))) = (pick(&self.groups, group).cloned(), esim(self, i)) {
                    let _ = self.reseller(a, ResellerOp::AddGroupEsim { group_id: id, iccid });
                }
            }
            Action::RemoveFromGroup { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    if let Ok(Reply::Esim(detail)) = self.reseller(a, ResellerOp::GetEsim { iccid: iccid.clone() }) {
                        if let Some(group_id) = detail.item.group_id {
                            let _ = self.reseller(a, ResellerOp::RemoveGroupEsim { group_id, iccid });
                        }
                    }
                }
            }
            Action::AutoRefill { account, card } => {
                let id = pick(&self.accounts, account).unwrap().account_id.clone();
                let card = [
                    CardBehavior::Ok,
                    CardBehavior::Ok,
                    CardBehavior::Declined,
                    CardBehavior::RequiresAction,
                    CardBehavior::Expired,
                ][card as usize % 5];
                let response = self.h.admin(AdminOp::SetAutoRefill {
                    account_id: id,
                    enabled: Some(true),
                    amount_usd: Some(Decimal::from(20)),
                    card: Some(card),
                });
                let _ = self.record(response);
            }
            Action::Freeze { account, frozen } => {
                let id = pick(&self.accounts, account).unwrap().account_id.clone();
                let response = self.h.admin(AdminOp::Freeze { account_id: id, frozen });
                let _ = self.record(response);
            }
            Action::Webhook { account } => {
                let account = account as usize % self.accounts.len();
                let _ = self.reseller(account, super::create_webhook("https://hooks.example.com/in", &["*"]));
            }
            Action::DeliveryOutcome { pick: p, status } => {
                let pending: Vec<u64> = self.h.effects.iter().map(|Effect::Deliver(d)| d.delivery_id).collect();
                if let Some(&id) = pick(&pending, p) {
                    self.h.effects.retain(|Effect::Deliver(d)| d.delivery_id != id);
                    let response = self.h.run(Command::DeliveryOutcome {
                        delivery_id: id,
                        result: DeliveryResult::Status(status),
                        duration_ms: None,
                    });
                    let _ = self.record(response);
                }
            }
            Action::Advance { seconds } => self.h.advance_secs(seconds.into()),
            Action::Read { esim: i } => {
                if let Some((a, iccid)) = esim(self, i) {
                    let _ = self.reseller(a, ResellerOp::GetEsim { iccid });
                }
            }
        }
    }
}
