#include "store/client/get_call.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "store/client/location_cache.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

// How a GET waits for its pages to land: it yields the core for `spin`
// after the last page that landed (a lone page lands within it, and the
// next of a batch sooner), then sleeps in short steps.
class LandingPace {
 public:
  explicit LandingPace(std::chrono::microseconds spin) : spin_(spin), until_(Clock::now() + spin) {}
  void Landed() { until_ = Clock::now() + spin_; }
  void Pause() const {
    if (Clock::now() < until_) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }

 private:
  const std::chrono::microseconds spin_;
  Clock::time_point until_;
};

// Whether two answers name the same page: its place, length, generation
// and bytes (not its region's version, which other pages move).
bool SamePage(const Location& a, const Location& b) {
  return a.found == b.found && a.addr == b.addr && a.length == b.length && a.generation == b.generation &&
         a.checksum == b.checksum;
}

Status LateMiss(const std::string& key) {
  return Status::NotFound("store: key '" + key + "': its lookup is older than the read window");
}

}  // namespace

bool GetCall::Probe::Covers(const std::string& home) const {
  for (const Home& h : homes)
    if (h.name == home) return true;
  return false;
}

GetCall::GetCall(ClientParts* parts, const std::vector<std::string>& keys,
                 const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<Memory>& memory,
                 std::vector<Status>* results, std::vector<uint64_t>* lengths)
    : parts_(parts),
      keys_(keys),
      buffers_(buffers),
      memory_(memory),
      results_(results),
      lengths_(lengths),
      asked_(Clock::now()),
      deadline_(asked_ + std::chrono::milliseconds(parts->settings.store_deadline_ms)),
      reads_(parts, buffers, memory),
      again_(parts, buffers, memory),
      guessed_(keys.size(), SIZE_MAX) {
  reads_.pages().reserve(keys.size());
}

net::Deadline GetCall::ReadBy(const NodeCall& call) const {
  return std::min(deadline_, asked_ + std::chrono::milliseconds(call.node->info.read_window_ms));
}

void GetCall::Run(std::vector<NodeCall> calls) {
  calls_ = std::move(calls);
  StartGuesses();
  SetAsideProbedGuesses();
  Replies first = Ask(&calls_);
  if (!probe_.homes.empty()) ConfirmByVersions();
  Replies second = Ask(&later_);
  Collect(&calls_, &first);
  Collect(&later_, &second);
  AwaitPages();
  for (const auto& [home, read] : unasked_) parts_->QueueTouches(home, keys_, read);
}

void GetCall::StartGuesses() {
  if (parts_->locations.capacity() == 0) return;
  std::vector<PageRead> pages;
  PageReads::Extra versions;
  net::Deadline by = deadline_;
  CachedLocation cached;
  for (const NodeCall& call : calls_) {
    // A node's own pages are answered by a direct call, at once.
    if (parts_->caller.IsSelf(call.node->name)) continue;
    bool verified = false, any = false;
    for (size_t i : call.keys) {
      if (!parts_->locations.Find(keys_[i], &cached) ||
          !CachedLocationUsable(cached, call.node->name, call.node->info.epoch, TotalBytes(buffers_[i])))
        continue;
      pages.push_back(PageRead{i, cached.where, call.node, true, PageRead::Check::kUnconfirmed});
      any = true;
      verified = verified || (parts_->settings.store_verify && memory_[i] == Memory::kHost);
    }
    if (any) by = std::min(by, ReadBy(call));
    // The home's region versions (and epoch), into a scratch slot, for its
    // guesses that will be checksummed: a slot reused while its page is
    // read is caught there. Pages not checksummed (GPU memory, or
    // KVF_STORE_VERIFY=0) wait for their lookups, whose read window keeps
    // the page whole.
    const NodeInfo& info = call.node->info;
    if (!verified || info.region_bytes == 0 || info.versions_addr == 0) continue;
    uint8_t* slot = parts_->scratch.Take();
    if (slot == nullptr) continue;  // every slot in use: lookups confirm these guesses
    probe_.homes.push_back({call.node->name, slot, versions.requests.size()});
    versions.requests.push_back(
        {OpCode::kRead, slot, call.node->segment, info.versions_addr, ClientParts::kVersionsReadBytes});
    versions.epochs.push_back(info.epoch);
  }
  // One engine batch with the pages, waited for once. A guess the engine
  // refuses is no guess: its key is looked up as any.
  const size_t flights = reads_.flights().size();
  (void)reads_.Launch(std::move(pages), by, versions);
  for (size_t p = 0; p < reads_.pages().size(); ++p) guessed_[reads_.pages()[p].key] = p;
  if (reads_.flights().size() == flights) {  // nothing launched: no versions either
    for (const Probe::Home& h : probe_.homes) parts_->scratch.Give(h.slot);
    probe_.homes.clear();
    return;
  }
  probe_.flight = flights;
}

void GetCall::SetAsideProbedGuesses() {
  for (NodeCall& call : calls_) {
    NodeCall rest;
    rest.node = call.node;
    std::erase_if(call.keys, [&](size_t i) {
      const bool wait =
          guessed_[i] != SIZE_MAX && reads_.pages()[guessed_[i]].verify && probe_.Covers(call.node->name);
      if (wait) rest.keys.push_back(i);
      return wait;
    });
    if (!rest.keys.empty()) later_.push_back(std::move(rest));
  }
}

Replies GetCall::Ask(std::vector<NodeCall>* calls) {
  std::erase_if(*calls, [](const NodeCall& call) { return call.keys.empty(); });
  if (calls->empty()) return {};
  // Too late for a round trip: the keys are misses, and no home is blamed.
  if (Clock::now() + parts_->LateMargin() >= deadline_) {
    for (const NodeCall& call : *calls)
      for (size_t i : call.keys) {
        (*results_)[i] = Status::NotFound("store: key '" + keys_[i] + "': no time was left to look it up");
        ClientCounters::Add(parts_->counters.misses_late, 1);
      }
    calls->clear();
    return {};
  }
  for (NodeCall& call : *calls) call.request = EncodeKeys(Op::kLookup, KeysOf(keys_, call.keys));
  return parts_->caller.Send(calls, deadline_);
}

std::vector<GetCall::Versions> GetCall::AwaitVersions() {
  // The versions come within a round trip, or behind pages queued on
  // their rail; a home that has not sent them within a quarter of the time
  // left (hung) has its guesses looked up instead, and the others' lookups
  // still go with most of their time. They share the pages' batch, posted
  // after its pages: normally all of it has landed by then. Meanwhile the
  // pages are checksummed as they land, under the transfer of the later
  // ones; one wait takes what is left once every page has landed (the
  // versions, posted last), or what a hung home holds at `until`.
  PageReads::Flight& f = reads_.flights()[probe_.flight];
  const auto now = Clock::now();
  const net::Deadline until = now + std::max<net::Deadline::duration>(kVersionsWait, (deadline_ - now) / 4);
  if (parts_->verify_short_as_they_land || parts_->verify_long_as_they_land || f.flight.AnyLandsMeanwhile()) {
    LandingPace pace(std::chrono::microseconds(parts_->settings.store_spin_us));
    for (size_t next = 0; next < reads_.pages().size() && Clock::now() < until;) {
      if (reads_.ChecksumLanded(probe_.flight, &next)) pace.Landed();
      else if (next < reads_.pages().size()) pace.Pause();
    }
  }
  std::vector<bool> ended;
  parts_->runner.Peek(&f.flight, until, &ended, &f.outcomes);
  std::vector<Versions> got(probe_.homes.size());
  for (size_t h = 0; h < probe_.homes.size(); ++h) {
    const Probe::Home& home = probe_.homes[h];
    if (!ended[home.group]) {
      // A READ not ended may still write its slot: it waits out the transfer timeout.
      parts_->scratch.GiveLater(home.slot, Clock::now() + std::chrono::milliseconds(parts_->settings.transfer_timeout_ms) +
                                               std::chrono::seconds(1));
      continue;
    }
    if (f.outcomes[home.group].ok()) {
      got[h].emplace();
      std::memcpy(got[h]->data(), home.slot, ClientParts::kVersionsReadBytes);
    }
    parts_->scratch.Give(home.slot);
  }
  return got;
}

void GetCall::ConfirmByVersions() {
  const std::vector<Versions> versions = AwaitVersions();
  for (NodeCall& call : later_) {
    size_t h = 0;
    while (h < probe_.homes.size() && probe_.homes[h].name != call.node->name) ++h;
    const NodeInfo& info = call.node->info;
    // The page the versions came from must be the node this view knows (a
    // restarted node at the same address starts its versions again at 0).
    if (h == probe_.homes.size() || !versions[h] || (*versions[h])[RegionVersions::kRegions] != info.epoch) continue;
    std::vector<size_t> confirmed;
    std::erase_if(call.keys, [&](size_t i) {
      PageRead& guess = reads_.pages()[guessed_[i]];
      if (!guess.verify) return false;  // not checksummed: its lookup confirms it
      const uint64_t offset = guess.where.addr - info.pool_addr;
      const size_t region =
          static_cast<size_t>(std::min<uint64_t>(offset / info.region_bytes, RegionVersions::kRegions - 1));
      if ((*versions[h])[region] != guess.where.version) return false;
      guess.check = PageRead::Check::kConfirmed;
      confirmed.push_back(i);
      return true;
    });
    ClientCounters::Add(parts_->counters.get_cached, confirmed.size());
    ClientCounters::Add(parts_->counters.get_no_lookup, confirmed.size());
    if (!confirmed.empty()) unasked_.push_back({call.node->name, std::move(confirmed)});
  }
  probe_.homes.clear();
}

void GetCall::Collect(std::vector<NodeCall>* calls, Replies* replies) {
  if (!*replies) return;
  size_t c = 0;
  for (size_t n = 0; n < calls->size(); ++n) {
    const Wait wait = reads_.pages().empty() ? Wait::kPollFirst : Wait::kSleep;
    if (!replies->Next(deadline_ + std::chrono::seconds(1), wait, &c)) break;
    StartReads((*calls)[c]);
  }
  for (size_t u : replies->unanswered())
    for (size_t i : (*calls)[u].keys) (*results_)[i] = (*calls)[u].status;
}

void GetCall::StartReads(const NodeCall& call) {
  std::vector<Location> found;
  Status s = call.status;
  if (s.ok()) s = DecodeLocations(call.reply, call.keys.size(), &found);
  const net::Deadline by = ReadBy(call);
  const bool late = Clock::now() + parts_->LateMargin() >= by;
  std::vector<PageRead> pages;
  for (size_t j = 0; j < call.keys.size(); ++j) {
    const size_t i = call.keys[j];
    Status& r = (*results_)[i];
    PageRead* guess = guessed_[i] == SIZE_MAX ? nullptr : &reads_.pages()[guessed_[i]];
    if (!s.ok()) {
      r = s;
      continue;
    }
    const Location& loc = found[j];
    if (!loc.found) {
      r = Absent(keys_[i]);  // counted by the client, once per key
      parts_->locations.Erase(keys_[i]);
      continue;
    }
    parts_->locations.Put(keys_[i], CachedLocation{call.node->name, call.node->info.epoch, loc});
    if (guess != nullptr && SamePage(guess->where, loc)) {
      guess->check = PageRead::Check::kConfirmed;
      ClientCounters::Add(parts_->counters.get_cached, 1);
      continue;
    }
    if (TotalBytes(buffers_[i]) < loc.length) {
      r = Status::InvalidArgument("store: the page of key '" + keys_[i] + "' has " + std::to_string(loc.length) +
                                  " bytes, more than its buffers hold");
      continue;
    }
    if (late) {
      r = LateMiss(keys_[i]);
      ClientCounters::Add(parts_->counters.misses_late, 1);
      continue;
    }
    if (guess != nullptr) {
      // Read again from `loc` once the guess has ended: now, if it has (not
      // after the other homes' answers, which a hung home holds to the
      // call's deadline).
      const Status* ended = nullptr;
      if (reads_.PageLanded(*guess, &ended) && ended->ok()) {
        guess->check = PageRead::Check::kUnconfirmed;  // waited out; its bytes are not the key's
        pages.push_back(PageRead{i, loc, call.node});
        continue;
      }
      guess->where = loc;
      guess->check = PageRead::Check::kMoved;
      continue;
    }
    pages.push_back(PageRead{i, loc, call.node});
  }
  Refuse(reads_.Launch(std::move(pages), by));
}

void GetCall::AwaitPages() {
  // Pages are verified as each one's READs land, in whatever order they
  // land: a home that hangs holds up only its own pages. A guess its answer
  // did not confirm is waited out all the same (no READ may write the
  // caller's buffers once the call returns), and read again at once when
  // the answer found the page elsewhere: not after the other pages, where
  // a hung home's pages would hold it up to the call's deadline. Pages are
  // taken in order while no guess that moved waits (a pass stops at the
  // first page still out, as a wait for it would); with one waiting, each
  // pass looks at every page. Polled, yielding the core, for
  // KVF_STORE_SPIN_US after each page that lands, then in short sleeps;
  // each flight's deadline bounds the wait for its pages.
  std::vector<PageRead>& pages = reads_.pages();
  std::vector<bool> handled(pages.size(), false);
  size_t left = pages.size(), first_out = 0;
  size_t moved_left = static_cast<size_t>(
      std::count_if(pages.begin(), pages.end(), [](const PageRead& r) { return r.check == PageRead::Check::kMoved; }));
  LandingPace pace(std::chrono::microseconds(parts_->settings.store_spin_us));
  while (left > 0) {
    std::vector<PageRead> moved;
    net::Deadline moved_by = deadline_;
    for (size_t p = first_out; p < pages.size(); ++p) {
      if (handled[p]) continue;
      PageRead& read = pages[p];
      // A confirmed page read in pieces takes each into its checksum as it lands.
      const bool feeds = read.pieces != nullptr && read.check == PageRead::Check::kConfirmed;
      bool failed = false;
      const bool fed = feeds && read.sum == PageRead::Sum::kNotTaken && reads_.FeedPieces(&read, &failed);
      const Status* ended = nullptr;
      if (!reads_.PageLanded(read, &ended)) {
        if (fed) pace.Landed();
        if (moved_left == 0) break;
        continue;
      }
      handled[p] = true;
      --left;
      pace.Landed();
      while (first_out < handled.size() && handled[first_out]) ++first_out;
      if (read.check == PageRead::Check::kMoved) --moved_left;
      // Its last pieces may have landed since it was fed.
      if (feeds && read.sum == PageRead::Sum::kNotTaken && ended->ok()) reads_.FeedPieces(&read, &failed);
      TakeLanded(&read, *ended, &moved, &moved_by);
    }
    if (!moved.empty()) Refuse(again_.Launch(std::move(moved), moved_by));  // read again now
    if (left == 0) break;
    pace.Pause();
  }
  for (const PageRead& read : again_.pages()) FinishRead(again_, read, again_.Land(read));
  reads_.LandAll();  // flights none of whose pages is read (every one refused) end here too
}

void GetCall::TakeLanded(PageRead* read, const Status& ended, std::vector<PageRead>* moved, net::Deadline* moved_by) {
  const size_t i = read->key;
  if (read->check == PageRead::Check::kConfirmed) {
    FinishRead(reads_, *read, ended);
    return;
  }
  ClientCounters::Add(parts_->counters.get_cached_stale, 1);
  if (read->check != PageRead::Check::kMoved) return;  // results[i] says what the answer was
  if (!ended.ok()) {  // its READs may still be writing the buffers: no second READ into them
    (*results_)[i] = ReadFailed(ended, i, *read->home);
    return;
  }
  const net::Deadline by = reads_.flights()[read->flight].by;
  if (Clock::now() + parts_->LateMargin() >= by) {  // no READ started that could not end in time
    (*results_)[i] = LateMiss(keys_[i]);
    ClientCounters::Add(parts_->counters.misses_late, 1);
    return;
  }
  moved->push_back(*read);
  moved->back().check = PageRead::Check::kConfirmed;
  *moved_by = std::min(*moved_by, by);
}

void GetCall::FinishRead(const PageReads& reads, const PageRead& read, const Status& ended) {
  const size_t i = read.key;
  Status& r = (*results_)[i];
  if (!ended.ok()) {
    r = ReadFailed(ended, i, *read.home);
    return;
  }
  if (!read.verify && parts_->settings.store_verify) ClientCounters::Add(parts_->counters.get_unverified, 1);
  if (read.verify && !reads.Verified(read)) {
    r = Status::NotFound("store: the page of key '" + keys_[i] +
                         "' did not verify (replaced or evicted while read, or corrupt): a miss");
    ClientCounters::Add(parts_->counters.misses_checksum, 1);
    return;
  }
  (*lengths_)[i] = read.where.length;
}

Status GetCall::ReadFailed(const Status& failure, size_t key, const NodeView& home) {
  Status r = failure.Annotate("store: reading the page of '" + keys_[key] + "'");
  // The member's engine did not serve the READ: it died, or restarted (its
  // lookup answered, but this view still holds the old engine's segment).
  // Out of placement like a failed call, and greeted again later.
  parts_->caller.MarkDownIfUnreachable(home.name, r);
  return r;
}

void GetCall::Refuse(const PageReads::Refused& refused) {
  for (const auto& [read, why] : refused) (*results_)[read.key] = ReadFailed(why, read.key, *read.home);
}

}  // namespace kvfabric::store
