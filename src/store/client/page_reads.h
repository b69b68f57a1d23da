// PageReads: the READs of one GET's pages, by flight (one engine batch of
// one home's pages, or of the guesses of every home), and their
// verification as they land. A page is read into its key's buffers; it
// counts once its READs have ended and, when verified, its bytes match the
// checksum its home keeps with it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kvfabric/status.h"
#include "store/client/client_parts.h"
#include "store/wire/checksum.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

// The READs of one page: started as soon as its home answered, or before,
// from the location this process remembers (a guess, kept only when the
// home's answer names the same page).
struct PageRead {
  enum class Check : uint8_t {
    kConfirmed,    // the home's answer names this page: its bytes are the key's (once verified)
    kUnconfirmed,  // a guess with no answer yet, or whose answer was a miss or a failure (in results)
    kMoved,        // a guess whose answer names another page (`where` now): read again once it ends
  };
  // Whether its bytes match where.checksum, once that is known: taken as
  // soon as its READs land (PageReads::ChecksumLanded) or else when it is finished.
  enum class Sum : uint8_t { kNotTaken, kMatches, kDiffers };
  size_t key = 0;
  Location where;
  std::shared_ptr<const NodeView> home;
  bool verify = true;
  Check check = Check::kConfirmed;
  Sum sum = Sum::kNotTaken;  // Launch resets it: a page read again has new bytes
  size_t flight = 0;         // its READs: group `group` of flights[flight]
  size_t group = 0;
  // A page longer than kLandingPiece, verified as it lands, is read in
  // pieces of at most that, and its checksum fed each piece as soon as the
  // piece lands, while it is still in cache: hashing a whole large page
  // once it has landed reads it back from memory.
  struct Pieces {
    std::vector<ByteRange> ranges;  // where each READ of the group lands, in order
    size_t fed = 0;                 // how many of them `sum` has taken
    ChecksumStream sum;
  };
  std::shared_ptr<Pieces> pieces = nullptr;  // Launch sets it (or null: the page is checksummed whole)
};

// Whether the buffers a page was read into hold what its PUT stored: the
// checksum of its bytes against the one its home keeps with it.
bool LandedAsStored(const std::vector<StoreBuffer>& buffers, const Location& where);

class PageReads {
 public:
  // The pages of one home (or the guesses) started together: one engine batch.
  struct Flight {
    BatchRunner::Flight flight;
    net::Deadline by;              // no later than the read window of the lookup
    std::vector<Status> outcomes;  // per page (group), once landed
    bool landed = false;
  };
  // READs run before the pages of a flight, in the same engine batch: the
  // region versions of homes, READ into host memory of the nodes in
  // `epochs` (scratch slots), groups 0..k-1 of that flight.
  struct Extra {
    std::vector<TransferRequest> requests;
    std::vector<uint64_t> epochs;
  };
  using Refused = std::vector<std::pair<PageRead, Status>>;

  // Reads into `buffers` (per key), whose memory `memory` says.
  PageReads(ClientParts* parts, const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<Memory>& memory)
      : parts_(parts), buffers_(buffers), memory_(memory) {}

  std::vector<PageRead>& pages() { return pages_; }
  std::vector<Flight>& flights() { return flights_; }

  // Starts the READs of `pages` (key, where, home, check set) into their
  // keys' buffers as one flight that must end by `by`, with `extra` first
  // (groups 0..k-1; the pages are groups k..), appending the pages to
  // pages(). Returns the pages the engine refused, each with the refusal
  // (a flight of refusals only is not kept).
  Refused Launch(std::vector<PageRead> pages, net::Deadline by, const Extra& extra = {});
  // Without waiting: true, with the outcome of `page`'s READs in *outcome,
  // once they alone have ended (the flight stays for Land, which frees it)
  // or its flight's deadline has passed (Land's outcome then); false while
  // they are still out.
  bool PageLanded(const PageRead& page, const Status** outcome);
  // The outcome of `page`'s READs, waiting for its flight the first time.
  const Status& Land(const PageRead& page);
  // Checksums the verified pages of flight `flight` that are checksummed
  // as they land and whose READs alone have ended well (PageRead::sum), a
  // page read in pieces piece by piece (FeedPieces), in order from
  // pages()[*next], which it advances: a pass stops at the first page still
  // out. True when it took a page or a piece.
  bool ChecksumLanded(size_t flight, size_t* next);
  // Adds to the checksum of `read` (read in pieces) each piece that has
  // landed since, in order, and sets read->sum once all have: true when it
  // added any. *failed: a piece's READ failed (the page is not checksummed;
  // its outcome fails it). Nothing once the flight is finished (freed).
  bool FeedPieces(PageRead* read, bool* failed);
  // Whether the bytes of a page whose READs ended well are its key's: its
  // sum, taken now when it was not yet.
  bool Verified(const PageRead& read) const;
  // Ends every flight not landed yet (those whose pages were all refused or
  // never waited for): no READ writes the buffers after this.
  void LandAll();

 private:
  // The READs of `page` into its key's buffers, in pieces when it is
  // verified as it lands; appended to `requests`.
  void AddReads(PageRead* page, std::vector<TransferRequest>* requests) const;

  ClientParts* const parts_;
  const std::vector<std::vector<StoreBuffer>>& buffers_;
  const std::vector<Memory>& memory_;
  std::vector<PageRead> pages_;
  std::vector<Flight> flights_;
};

}  // namespace kvfabric::store
