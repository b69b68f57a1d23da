// The status codes, task states and op codes of kvfabric/codes.h: each row
// round-trips through Status, TaskStateName and the C constants of kvfabric.h.
#include "kvfabric/status.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kvfabric.h"
#include "kvfabric/codes.h"
#include "kvfabric/engine.h"

namespace kvfabric {
namespace {

struct Row {
  int number;
  std::string name;    // C++: Status::Code::k<name>, Status::<name>()
  std::string c_name;  // C: KVF_<c_name>
  int c_value;         // the C constant as compiled
  std::string meaning;
};

#define KVF_ROW_(number, Name, C_NAME, meaning) rows.push_back({number, #Name, #C_NAME, KVF_##C_NAME, meaning});

std::vector<Row> StatusRows() {
  std::vector<Row> rows;
  KVF_STATUS_CODES(KVF_ROW_)
  return rows;
}

std::vector<Row> TaskStateRows() {
  std::vector<Row> rows;
  KVF_TASK_STATES(KVF_ROW_)
  return rows;
}

std::vector<Row> OpCodeRows() {
  std::vector<Row> rows;
  KVF_OP_CODES(KVF_ROW_)
  return rows;
}

#undef KVF_ROW_

TEST(StatusTest, EveryCodeRoundTrips) {
  std::set<int> numbers;
  for (const Row& r : StatusRows()) {
    EXPECT_TRUE(numbers.insert(r.number).second) << r.name << ": number " << r.number << " used twice";
    EXPECT_GT(r.number, 0) << r.name << ": 0 is OK";
    EXPECT_EQ(r.c_value, -r.number) << "KVF_" << r.c_name;
    EXPECT_EQ(Status::CodeName(static_cast<Status::Code>(r.number)), r.name);
    EXPECT_FALSE(r.meaning.empty()) << r.name;
  }
  // Each factory builds its own code, and ToString names it.
#define KVF_FACTORY_(number, Name, C_NAME, meaning)                         \
  {                                                                         \
    const Status s = Status::Name("detail");                                \
    EXPECT_FALSE(s.ok());                                                   \
    EXPECT_EQ(s.code(), Status::Code::k##Name);                             \
    EXPECT_EQ(static_cast<int>(s.code()), number);                          \
    EXPECT_EQ(s.ToString(), #Name ": detail");                              \
    EXPECT_EQ(-static_cast<int>(s.code()), KVF_##C_NAME);                   \
  }
  KVF_STATUS_CODES(KVF_FACTORY_)
#undef KVF_FACTORY_
  EXPECT_EQ(KVF_OK, 0);
  EXPECT_EQ(static_cast<int>(Status::Code::kOk), 0);
  EXPECT_EQ(Status::CodeName(Status::Code::kOk), "OK");
  EXPECT_EQ(Status::OK().ToString(), "OK");
  EXPECT_EQ(Status::CodeName(static_cast<Status::Code>(static_cast<int>(StatusRows().size()) + 1)), "Unknown");
}

TEST(StatusTest, TaskStatesAndOpCodesRoundTrip) {
  std::set<int> numbers;
  for (const Row& r : TaskStateRows()) {
    EXPECT_TRUE(numbers.insert(r.number).second) << r.c_name;
    EXPECT_EQ(r.c_value, r.number) << "KVF_" << r.c_name;
    EXPECT_STREQ(TaskStateName(static_cast<TaskState>(r.number)), r.c_name.c_str());
  }
  EXPECT_STREQ(TaskStateName(static_cast<TaskState>(99)), "UNKNOWN");
#define KVF_STATE_(number, Name, C_NAME, meaning) EXPECT_EQ(static_cast<int>(TaskState::k##Name), KVF_##C_NAME);
  KVF_TASK_STATES(KVF_STATE_)
#undef KVF_STATE_
  numbers.clear();
  for (const Row& r : OpCodeRows()) {
    EXPECT_TRUE(numbers.insert(r.number).second) << r.c_name;
    EXPECT_EQ(r.c_value, r.number) << "KVF_" << r.c_name;
  }
#define KVF_OP_(number, Name, C_NAME, meaning) EXPECT_EQ(static_cast<int>(OpCode::k##Name), KVF_##C_NAME);
  KVF_OP_CODES(KVF_OP_)
#undef KVF_OP_
}

// The numbers are ABI (C return codes, Python's .code, the Mooncake shim's
// op codes): this list is the released one, written out on purpose. It may
// only grow at the end.
TEST(StatusTest, NumbersAreTheReleasedOnes) {
  EXPECT_EQ(KVF_EINVAL, -1);
  EXPECT_EQ(KVF_ENOTFOUND, -2);
  EXPECT_EQ(KVF_ERANGE, -3);
  EXPECT_EQ(KVF_EBUSY, -4);
  EXPECT_EQ(KVF_ETIMEOUT, -5);
  EXPECT_EQ(KVF_EFABRIC, -6);
  EXPECT_EQ(KVF_ENETWORK, -7);
  EXPECT_EQ(KVF_EPROTOCOL, -8);
  EXPECT_EQ(KVF_EUNAVAILABLE, -9);
  EXPECT_EQ(KVF_EINTERNAL, -10);
  EXPECT_EQ(KVF_EPERM, -11);
  EXPECT_EQ(static_cast<int>(Status::Code::kPermissionDenied), 11);
  EXPECT_EQ(KVF_ECLOSED, -12);
  EXPECT_EQ(static_cast<int>(Status::Code::kClosed), 12);
  EXPECT_EQ(KVF_PENDING, 0);
  EXPECT_EQ(KVF_COMPLETED, 1);
  EXPECT_EQ(KVF_FAILED, 2);
  EXPECT_EQ(KVF_TIMEOUT, 3);
  EXPECT_EQ(KVF_READ, 0);
  EXPECT_EQ(KVF_WRITE, 1);
  EXPECT_EQ(StatusRows().size(), 12u) << "a new code: add it to this list too";
  EXPECT_EQ(TaskStateRows().size(), 4u);
  EXPECT_EQ(OpCodeRows().size(), 2u);
}

// kvfabric.h names every constant in its comments (the enums themselves are
// generated, so a reader grepping the header still finds them).
TEST(StatusTest, CHeaderNamesEveryConstant) {
  std::ifstream f(std::string(KVF_SOURCE_DIR) + "/include/kvfabric.h");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string header = ss.str();
  for (const auto& rows : {StatusRows(), TaskStateRows(), OpCodeRows()})
    for (const Row& r : rows)
      EXPECT_NE(header.find("KVF_" + r.c_name), std::string::npos) << "include/kvfabric.h does not mention KVF_"
                                                                   << r.c_name;
}

}  // namespace
}  // namespace kvfabric
