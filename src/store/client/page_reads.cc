#include "store/client/page_reads.h"

#include <algorithm>
#include <chrono>

namespace kvfabric::store {
namespace {

PageRead::Sum SumOf(const std::vector<StoreBuffer>& buffers, const Location& where) {
  return LandedAsStored(buffers, where) ? PageRead::Sum::kMatches : PageRead::Sum::kDiffers;
}

}  // namespace

bool LandedAsStored(const std::vector<StoreBuffer>& buffers, const Location& where) {
  return ChecksumOfBuffers(buffers, where.length) == where.checksum;
}

void PageReads::AddReads(PageRead* page, std::vector<TransferRequest>* requests) const {
  const bool in_pieces = page->pieces != nullptr;
  uint64_t left = page->where.length, remote = page->where.addr;
  for (const StoreBuffer& b : buffers_[page->key]) {
    if (left == 0) break;
    const uint64_t n = std::min<uint64_t>(left, b.length);
    for (uint64_t at = 0; at < n;) {
      const uint64_t piece = in_pieces ? std::min(n - at, ClientParts::kLandingPiece) : n - at;
      uint8_t* local = static_cast<uint8_t*>(b.addr) + at;
      requests->push_back({OpCode::kRead, local, page->home->segment, remote, static_cast<size_t>(piece)});
      if (in_pieces) page->pieces->ranges.push_back({local, static_cast<size_t>(piece)});
      remote += piece;
      at += piece;
    }
    left -= n;
  }
}

PageReads::Refused PageReads::Launch(std::vector<PageRead> pages, net::Deadline by, const Extra& extra) {
  Refused refused;
  if (pages.empty()) return refused;
  const size_t k = extra.requests.size();
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups(k);
  std::vector<uint64_t> copyable = extra.epochs;  // the extra READs go into scratch slots, host memory
  copyable.resize(k, BatchRunner::kNoCopy);
  for (PageRead& page : pages) {
    const bool host = memory_[page.key] == Memory::kHost;
    copyable.push_back(host ? page.home->info.epoch : BatchRunner::kNoCopy);
    // No checksum on GPU memory: its page is whole by the read window alone.
    page.verify = parts_->settings.store_verify && host;
    page.sum = PageRead::Sum::kNotTaken;
    const bool in_pieces =
        page.verify && page.where.length > ClientParts::kLandingPiece && parts_->verify_long_as_they_land;
    page.pieces = in_pieces ? std::make_shared<PageRead::Pieces>() : nullptr;
    groups.push_back({requests.size(), 0});
    AddReads(&page, &requests);
    groups.back().second = requests.size();
  }
  // Posted after the pages (their groups first all the same): the pages
  // are what the caller waits for, and the extra READs are small.
  for (size_t e = 0; e < k; ++e) {
    groups[e] = {requests.size(), requests.size() + 1};
    requests.push_back(extra.requests[e]);
  }
  Flight flight;
  flight.by = by;
  // A page copied from a mapped pool is checksummed right after its copy,
  // while its bytes are in this core's cache.
  const auto copied = [&](size_t g) {
    if (g < k) return;
    PageRead& page = pages[g - k];
    if (page.verify) page.sum = SumOf(buffers_[page.key], page.where);
  };
  parts_->runner.Start(requests, groups, &flight.flight, &flight.outcomes, copyable, copied, k);
  ClientCounters::Add(parts_->counters.copied_pages, flight.flight.Copied(k));  // the pages, not the extra
  bool any = false;
  for (size_t p = 0; p < pages.size(); ++p) any = any || flight.outcomes[k + p].ok();
  if (!any) {  // no page will land: the flight is not kept
    parts_->runner.Finish(&flight.flight, std::chrono::steady_clock::now(), &flight.outcomes);
    for (size_t p = 0; p < pages.size(); ++p) refused.push_back({std::move(pages[p]), flight.outcomes[k + p]});
    return refused;
  }
  for (size_t p = 0; p < pages.size(); ++p) {
    if (!flight.outcomes[k + p].ok()) {
      refused.push_back({std::move(pages[p]), flight.outcomes[k + p]});
      continue;
    }
    pages[p].flight = flights_.size();
    pages[p].group = k + p;
    pages_.push_back(std::move(pages[p]));
  }
  flights_.push_back(std::move(flight));
  return refused;
}

bool PageReads::PageLanded(const PageRead& page, const Status** outcome) {
  Flight& f = flights_[page.flight];
  if (!f.landed && std::chrono::steady_clock::now() < f.by) {
    Status failure;
    if (!parts_->runner.GroupEnded(f.flight, page.group, &failure)) return false;
    if (!failure.ok() && f.outcomes[page.group].ok()) f.outcomes[page.group] = failure;
    *outcome = &f.outcomes[page.group];
    return true;
  }
  *outcome = &Land(page);
  return true;
}

const Status& PageReads::Land(const PageRead& page) {
  Flight& f = flights_[page.flight];
  if (!f.landed) {
    parts_->runner.Finish(&f.flight, f.by, &f.outcomes);
    f.landed = true;
  }
  return f.outcomes[page.group];
}

bool PageReads::ChecksumLanded(size_t flight, size_t* next) {
  bool took = false;
  for (; *next < pages_.size(); ++*next) {
    PageRead& read = pages_[*next];
    if (read.flight != flight || !read.verify || read.sum != PageRead::Sum::kNotTaken) continue;
    if (read.pieces != nullptr) {
      bool failed = false;
      took = FeedPieces(&read, &failed) || took;
      if (failed) continue;  // a failed READ is not checksummed: its outcome fails it
      if (read.sum == PageRead::Sum::kNotTaken) break;
      continue;
    }
    const BatchRunner::Flight& f = flights_[flight].flight;
    // Pages that land on another thread (copies on the Copier's) are
    // checksummed beside the moves of the next ones, whatever the rails;
    // the others as VerifiesAsItLands says (if not, Verified checksums them
    // once the flight has landed).
    if (!f.LandsMeanwhile(read.group) && !parts_->VerifiesAsItLands(read.where.length)) continue;
    Status failure;
    if (!parts_->runner.GroupEnded(f, read.group, &failure)) break;
    if (!failure.ok()) continue;  // a failed READ is not checksummed: its outcome fails it
    read.sum = SumOf(buffers_[read.key], read.where);
    took = true;
  }
  return took;
}

bool PageReads::FeedPieces(PageRead* read, bool* failed) {
  *failed = false;
  const Flight& flight = flights_[read->flight];
  if (flight.landed) return false;  // finished and freed: Verified checksums the page whole
  PageRead::Pieces& p = *read->pieces;
  bool fed = false;
  Status failure;
  while (p.fed < p.ranges.size() && parts_->runner.RequestEnded(flight.flight, read->group, p.fed, &failure) &&
         failure.ok()) {
    p.sum.Add(p.ranges[p.fed].data, p.ranges[p.fed].length);
    ++p.fed;
    fed = true;
  }
  *failed = !failure.ok();
  if (p.fed == p.ranges.size())
    read->sum = p.sum.Digest() == read->where.checksum ? PageRead::Sum::kMatches : PageRead::Sum::kDiffers;
  return fed;
}

bool PageReads::Verified(const PageRead& read) const {
  if (read.sum == PageRead::Sum::kNotTaken) return LandedAsStored(buffers_[read.key], read.where);
  return read.sum == PageRead::Sum::kMatches;
}

void PageReads::LandAll() {
  for (Flight& f : flights_)
    if (!f.landed) {
      parts_->runner.Finish(&f.flight, f.by, &f.outcomes);
      f.landed = true;
    }
}

}  // namespace kvfabric::store
