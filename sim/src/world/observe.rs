//! What a response teaches the world: the names it binds (a provisioned eSIM, a created
//! group, webhook or account), the keys each account uses, and the [`Fact`]s the checkers
//! judge (money moved or shown, a webhook's subscription, a secret shown).

use super::json::decimal;
use super::log::Fact;
use super::receiver::Mode;
use super::request::{Kind, Who};
use super::{AccountRec, Entity, GroupRec, SimRec, WebhookRec, World};
use bytes::Bytes;
use esim_engine::state::{EsimIx, GroupIx, WalletOwner};
use rust_decimal::Decimal;
use serde_json::Value;

/// Who a response answered and what it said, as the parts of [`World::observe`] read it.
struct Answer {
    /// The caller's index in [`World::accounts`], for a reseller's request.
    caller: Option<usize>,
    /// The caller's engine account.
    account: Option<u32>,
    fields: Fields,
}

impl Answer {
    fn text(&self, field: &str) -> Option<String> {
        self.fields.text(field)
    }

    fn money(&self, field: &str) -> Option<Decimal> {
        self.fields.money(field)
    }
}

impl World {
    /// Reads the facts out of a successful, freshly executed response. Each part of the
    /// interface has its own reader below; they share nothing but the parsed fields.
    pub(super) fn observe(&mut self, who: Who, kind: &Kind, body: &Bytes) {
        if matches!(kind, Kind::TestWebhook | Kind::Raw | Kind::Other | Kind::Deliveries) {
            return;
        }
        let Ok(fields) = serde_json::from_slice::<Fields>(body) else { return };
        let caller = match who {
            Who::Account(i) => Some(i),
            _ => None,
        };
        let account = caller.map(|i| self.accounts[i].engine);
        let answer = Answer { caller, account, fields };
        match kind {
            Kind::Provision { .. } | Kind::Fund | Kind::Defund | Kind::Add | Kind::ShowEsim => {
                self.observe_esim(kind, &answer)
            }
            Kind::FundGroup | Kind::DefundGroup | Kind::CreateGroup { .. } | Kind::ShowGroup => {
                self.observe_group(kind, &answer)
            }
            Kind::CreateWebhook { .. }
            | Kind::RotateSecret
            | Kind::Resend
            | Kind::UpdateWebhook { .. }
            | Kind::DeleteWebhook { .. } => self.observe_webhook(kind, &answer),
            Kind::Wallet
            | Kind::CreateAccount { .. }
            | Kind::TopUp { .. }
            | Kind::NewKey { .. }
            | Kind::Revoke { .. }
            | Kind::MadeKey
            | Kind::RevokedOwnKey => self.observe_account(kind, &answer),
            Kind::TestWebhook | Kind::Raw | Kind::Other | Kind::Deliveries => {}
        }
    }

    /// An eSIM's answers: a provisioning binds its name, money moved or shown is a fact.
    fn observe_esim(&mut self, kind: &Kind, answer: &Answer) {
        let account = answer.account;
        match kind {
            Kind::Provision { bind } => {
                let (Some(iccid), Some(owner), Some(account)) = (answer.text("iccid"), answer.caller, account) else {
                    return;
                };
                let engine = self.engine();
                let Some(sim) = engine.esims().iter().rposition(|e| *e.iccid == *iccid) else { return };
                assert_eq!(engine.esims()[sim].account.0, account, "an eSIM is provisioned into its caller's account");
                let name = bind.clone().unwrap_or_else(|| iccid.clone());
                self.bind(&name, iccid.clone(), Entity::Sim(self.sims.len()));
                self.sims.push(SimRec { name, iccid, engine: sim as u32, owner });
                self.log.facts.push(Fact::Provisioned { account, sim: sim as u32 });
            }
            Kind::Fund => {
                let sim = self.sim_by_id(answer.text("iccid"));
                let (Some(account), Some(sim), Some(amount), Some(shown)) =
                    (account, sim, answer.money("funded_usd"), answer.money("wallet_balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::EsimFunded { account, sim, amount, shown });
            }
            Kind::Defund | Kind::Add => {
                let (Some(account), Some(sim)) = (account, self.sim_by_id(answer.text("iccid"))) else { return };
                if let Some(estimate) = answer.money("estimated_return_usd") {
                    self.log.facts.push(Fact::ReturnRequested {
                        account,
                        owner: WalletOwner::Esim(EsimIx(sim)),
                        estimate,
                    });
                }
            }
            Kind::ShowEsim => {
                let sim = self.sim_by_id(answer.text("iccid"));
                if let (Some(sim), Some(shown)) = (sim, answer.money("wallet_balance_usd")) {
                    self.log.facts.push(Fact::EsimShown { sim, shown });
                }
            }
            other => unreachable!("{other:?} is no eSIM answer"),
        }
    }

    /// A group's answers: its creation binds its name, money moved or shown is a fact.
    fn observe_group(&mut self, kind: &Kind, answer: &Answer) {
        let account = answer.account;
        match kind {
            Kind::FundGroup => {
                let group = self.group_by_id(answer.text("group_id"));
                let (Some(account), Some(group), Some(amount), Some(shown)) =
                    (account, group, answer.money("funded_usd"), answer.money("balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::GroupFunded { account, group, amount, shown });
            }
            Kind::DefundGroup => {
                let group = self.group_by_id(answer.text("group_id"));
                let (Some(account), Some(group), Some(estimate)) =
                    (account, group, answer.money("estimated_return_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::ReturnRequested {
                    account,
                    owner: WalletOwner::Group(GroupIx(group)),
                    estimate,
                });
            }
            Kind::CreateGroup { bind } => {
                let (Some(id), Some(owner)) = (answer.text("id"), answer.caller) else { return };
                let Some(group) = self.engine().groups().iter().rposition(|g| g.id == id) else { return };
                let creator = self.engine().groups()[group].account.0;
                assert_eq!(creator, self.accounts[owner].engine, "a group is created in its caller's account");
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Group(self.groups.len()));
                self.groups.push(GroupRec { name, id, engine: group as u32, owner });
            }
            Kind::ShowGroup => {
                if let (Some(group), Some(shown)) = (self.group_by_id(answer.text("id")), answer.money("balance_usd")) {
                    self.log.facts.push(Fact::GroupShown { group, shown });
                }
            }
            other => unreachable!("{other:?} is no group answer"),
        }
    }

    /// A webhook's answers: its subscription and switch as the reseller set them, and
    /// every signing secret shown (the signing checker's only source of secrets).
    fn observe_webhook(&mut self, kind: &Kind, answer: &Answer) {
        let account = answer.account;
        match kind {
            Kind::CreateWebhook { bind } => {
                let (Some(id), Some(owner), Some(account)) = (answer.text("id"), answer.caller, account) else {
                    return;
                };
                let Some(webhook) = self.engine().webhooks().iter().rposition(|w| w.id == id) else { return };
                let creator = self.engine().webhooks()[webhook].account.0;
                assert_eq!(creator, account, "a webhook is created in its caller's account");
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Webhook(self.webhooks.len()));
                let rec = WebhookRec { name, id, engine: webhook as u32, owner, mode: Mode::Ok, deleted: false };
                self.webhooks.push(rec);
                let (webhook, events) = (webhook as u32, answer.fields.events.clone());
                self.log.facts.push(Fact::WebhookSet { webhook, account, events, active: Some(true), deleted: false });
                if let Some(secret) = answer.fields.signing_secret.clone() {
                    self.log.facts.push(Fact::SecretShown { webhook, secret, rotated_at: None });
                }
            }
            Kind::RotateSecret => {
                let (Some(i), Some(secret)) =
                    (self.webhook_of(answer.text("id")), answer.fields.signing_secret.clone())
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::SecretShown { webhook, secret, rotated_at: Some(self.now) });
            }
            Kind::Resend => {
                let (Some(event_id), Some(i)) =
                    (answer.fields.event_id.clone(), self.webhook_of(answer.fields.webhook_id.clone()))
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::Resent { event_id, webhook });
            }
            Kind::UpdateWebhook { events, active } => {
                let (Some(i), Some(account)) = (self.webhook_of(answer.text("id")), account) else { return };
                let webhook = self.webhooks[i].engine;
                let (events, active) = (events.clone(), *active);
                self.log.facts.push(Fact::WebhookSet { webhook, account, events, active, deleted: false });
            }
            Kind::DeleteWebhook { id } => {
                let (Some(i), Some(account)) = (self.webhook_of(Some(id.clone())), account) else { return };
                self.webhooks[i].deleted = true;
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::WebhookSet { webhook, account, events: None, active: None, deleted: true });
            }
            other => unreachable!("{other:?} is no webhook answer"),
        }
    }

    /// An account's answers: its creation and keys (which key each account's calls use
    /// from now on), top-ups and the wallet as shown.
    fn observe_account(&mut self, kind: &Kind, answer: &Answer) {
        match kind {
            Kind::Wallet => {
                let (balance, topup, usage) = (
                    answer.money("balance_usd"),
                    answer.money("lifetime_topup_usd"),
                    answer.money("lifetime_usage_usd"),
                );
                if let (Some(account), Some(balance), Some(lifetime_topup), Some(lifetime_usage)) =
                    (answer.account, balance, topup, usage)
                {
                    self.log.facts.push(Fact::WalletShown { account, balance, lifetime_topup, lifetime_usage });
                }
            }
            Kind::CreateAccount { bind } => {
                let (Some(id), Some(key)) = (answer.text("account_id"), answer.text("api_key")) else { return };
                let Some(engine) = self.engine().accounts().iter().rposition(|a| a.id == id) else { return };
                let key_number = self.keys.len() as u32;
                self.keys.push(key);
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Account(self.accounts.len()));
                self.accounts.push(AccountRec { name, id, engine: engine as u32, key: key_number, revoked: false });
            }
            Kind::TopUp { account_id } => {
                if let (Some(Entity::Account(i)), Some(amount)) = (self.ids.get(account_id), answer.money("amount_usd"))
                {
                    let account = self.accounts[*i].engine;
                    self.log.facts.push(Fact::TopUp { account, amount });
                }
            }
            Kind::NewKey { account_id } => {
                if let (Some(&Entity::Account(i)), Some(key)) = (self.ids.get(account_id), answer.text("api_key")) {
                    self.accounts[i].key = self.keys.len() as u32;
                    self.accounts[i].revoked = false;
                    self.keys.push(key);
                }
            }
            Kind::Revoke { key } => {
                for account in self.accounts.iter_mut().filter(|a| &self.keys[a.key as usize] == key) {
                    account.revoked = true;
                }
            }
            Kind::MadeKey => {
                if let (Some(i), Some(key)) = (answer.caller, answer.text("api_key")) {
                    self.accounts[i].key = self.keys.len() as u32;
                    self.keys.push(key);
                }
            }
            Kind::RevokedOwnKey => {
                if let Some(i) = answer.caller {
                    self.accounts[i].revoked = true;
                }
            }
            other => unreachable!("{other:?} is no account answer"),
        }
    }

    /// The world's index of the webhook with this id, if it is one the world bound.
    fn webhook_of(&self, id: Option<String>) -> Option<usize> {
        match id.and_then(|id| self.ids.get(&id).copied()) {
            Some(Entity::Webhook(i)) => Some(i),
            _ => None,
        }
    }
}

/// The response fields the world reads; everything else is skipped, not parsed.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Fields {
    id: Option<String>,
    iccid: Option<String>,
    group_id: Option<String>,
    account_id: Option<String>,
    api_key: Option<String>,
    events: Option<Vec<String>>,
    funded_usd: Option<serde_json::Number>,
    wallet_balance_usd: Option<serde_json::Number>,
    balance_usd: Option<serde_json::Number>,
    estimated_return_usd: Option<serde_json::Number>,
    lifetime_topup_usd: Option<serde_json::Number>,
    lifetime_usage_usd: Option<serde_json::Number>,
    amount_usd: Option<serde_json::Number>,
    signing_secret: Option<String>,
    event_id: Option<String>,
    webhook_id: Option<String>,
}

impl Fields {
    fn text(&self, name: &str) -> Option<String> {
        match name {
            "id" => self.id.clone(),
            "iccid" => self.iccid.clone(),
            "group_id" => self.group_id.clone(),
            "account_id" => self.account_id.clone(),
            "api_key" => self.api_key.clone(),
            _ => None,
        }
    }

    fn money(&self, name: &str) -> Option<Decimal> {
        let number = match name {
            "funded_usd" => &self.funded_usd,
            "wallet_balance_usd" => &self.wallet_balance_usd,
            "balance_usd" => &self.balance_usd,
            "estimated_return_usd" => &self.estimated_return_usd,
            "lifetime_topup_usd" => &self.lifetime_topup_usd,
            "lifetime_usage_usd" => &self.lifetime_usage_usd,
            "amount_usd" => &self.amount_usd,
            _ => return None,
        };
        decimal(&Value::Number(number.clone()?))
    }
}
