#include "engine/batch_table.h"

#include <gtest/gtest.h>

namespace kvfabric::engine {
namespace {

TEST(BatchTable, CapacityIsBounded) {
  BatchTable t;
  BatchId id;
  EXPECT_EQ(t.Allocate(0, &id).code(), Status::Code::kInvalidArgument);
  Status big = t.Allocate(BatchTable::kMaxCapacity + 1, &id);
  EXPECT_EQ(big.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(big.message().find("several batches"), std::string::npos) << big.ToString();
  ASSERT_TRUE(t.Allocate(4, &id).ok());
  EXPECT_TRUE(t.Free(id).ok());
}

TEST(BatchTable, FreeIsRefusedWhileASubmitHoldsTheBatch) {
  BatchTable t;
  BatchId id;
  ASSERT_TRUE(t.Allocate(2, &id).ok());
  {
    BatchTable::SubmitGuard a;
    ASSERT_TRUE(t.AcquireForSubmit(id, &a).ok());
    {
      BatchTable::SubmitGuard b;  // a second thread submitting to the same batch
      ASSERT_TRUE(t.AcquireForSubmit(id, &b).ok());
      EXPECT_EQ(b->id(), id);
    }
    Status busy = t.Free(id);
    EXPECT_EQ(busy.code(), Status::Code::kBusy) << busy.ToString();
    EXPECT_NE(t.Find(id), nullptr);  // refused: nothing changed
  }
  EXPECT_TRUE(t.Free(id).ok());
  BatchTable::SubmitGuard late;
  EXPECT_EQ(t.AcquireForSubmit(id, &late).code(), Status::Code::kNotFound);
  EXPECT_FALSE(late);
  EXPECT_EQ(t.Free(id).code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace kvfabric::engine
