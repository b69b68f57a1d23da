#include "kvfabric/settings.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kvfabric {
namespace {

TEST(SettingsTest, DefaultsComeFromTheDeclaration) {
  Settings s;
  EXPECT_EQ(s.progress_threads, 1);
  EXPECT_EQ(s.write_completion, "delivery");
  EXPECT_TRUE(s.same_host_shm);
  EXPECT_EQ(s.store_put_mode, "push");
  EXPECT_EQ(s.store_verify_overlap, "auto");
  EXPECT_EQ(s.post_burst_us, 20);
  EXPECT_TRUE(s.store_share_pools);
  EXPECT_EQ(s.notice_path, "auto");
  EXPECT_EQ(s.rail_policy, "auto");
  EXPECT_EQ(Settings::Table().size(), 67u);
  for (const auto& i : Settings::Table()) {
    EXPECT_EQ(i.env.rfind("KVF_", 0), 0u) << i.env;
    EXPECT_FALSE(i.meaning.empty()) << i.env;
    EXPECT_EQ(s.Get(i.field), i.default_value);
  }
}

TEST(SettingsTest, SetByFieldOrVariable) {
  Settings s;
  ASSERT_TRUE(s.Set("tx_depth", "32").ok());
  EXPECT_EQ(s.tx_depth, 32);
  ASSERT_TRUE(s.Set("KVF_TX_DEPTH", "0x40").ok());
  EXPECT_EQ(s.tx_depth, 64);
  ASSERT_TRUE(s.Set("KVF_SAME_HOST_SHM", "false").ok());
  EXPECT_FALSE(s.same_host_shm);
  EXPECT_EQ(s.Set("KVF_TX_DEPTH", "12abc").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.tx_depth, 64);
  EXPECT_EQ(s.Set("KVF_SAME_HOST_SHM", "maybe").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.Set("KVF_NO_SUCH", "1").code(), Status::Code::kNotFound);
}

TEST(SettingsTest, AssignTakesNameEqualsValue) {
  Settings s;
  ASSERT_TRUE(s.Assign("KVF_TX_DEPTH=16").ok());
  EXPECT_EQ(s.tx_depth, 16);
  ASSERT_TRUE(s.Assign("log_level=debug").ok());
  EXPECT_EQ(s.log_level, "debug");
  ASSERT_TRUE(s.Assign("KVF_AUTH_TOKEN=a=b").ok());  // the first '=' splits
  EXPECT_EQ(s.auth_token, "a=b");
  EXPECT_EQ(s.Assign("KVF_TX_DEPTH").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.Assign("KVF_NO_SUCH=1").code(), Status::Code::kNotFound);
  EXPECT_EQ(s.tx_depth, 16);
}

TEST(SettingsTest, EnvironmentOverlayIsAllOrNothing) {
  setenv("KVF_PROGRESS_THREADS", "3", 1);
  setenv("KVF_TX_DEPTH", "not-a-number", 1);
  Settings s;
  Status st = s.ApplyEnvironment();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("KVF_TX_DEPTH"), std::string::npos);
  EXPECT_EQ(s.progress_threads, 1);  // unchanged
  setenv("KVF_TX_DEPTH", "8", 1);
  ASSERT_TRUE(s.ApplyEnvironment().ok());
  EXPECT_EQ(s.progress_threads, 3);
  EXPECT_EQ(s.tx_depth, 8);
  unsetenv("KVF_PROGRESS_THREADS");
  unsetenv("KVF_TX_DEPTH");
}

const SettingInfo& Info(const std::string& field) {
  for (const auto& i : Settings::Table())
    if (i.field == field) return i;
  ADD_FAILURE() << "no setting " << field;
  static const SettingInfo none;
  return none;
}

// The message of a refused Set, "" when it was accepted.
std::string Refusal(Settings* s, const std::string& name, const std::string& value) {
  Status st = s->Set(name, value);
  if (st.ok()) return "";
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  return st.message();
}

// A name that is no setting is matched to the declared one it most likely
// misspells, and only then: other tools' KVF_ variables are far from all.
TEST(SettingsTest, AMisspelledNameIsMatchedToTheSettingItMeant) {
  EXPECT_EQ(Settings::NearestSetting("KVF_STORE_POOL_SIZE"), "KVF_STORE_POOL_BYTES");
  EXPECT_EQ(Settings::NearestSetting("KVF_LOGLEVEL"), "KVF_LOG_LEVEL");
  EXPECT_EQ(Settings::NearestSetting("KVF_TOKEN"), "KVF_AUTH_TOKEN");
  EXPECT_EQ(Settings::NearestSetting("KVF_TX_DEPTH"), "") << "a declared name";
  for (const char* other : {"KVF_MOONCAKE_SHIM", "KVF_HICACHE_STAGING_BYTES", "KVF_HICACHE_PROTOCOL",
                            "KVF_FAKE_CUDA_PATH", "KVF_LAB_PREFIX", "KVF_SGLANG_SRC"})
    EXPECT_EQ(Settings::NearestSetting(other), "") << other;
  Settings s;
  const Status st = s.Set("store_pool_size", "1gb");
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("did you mean KVF_STORE_POOL_BYTES?"), std::string::npos) << st.ToString();
}

TEST(SettingsTest, ChoicesAreDeclaredWithTheirValues) {
  EXPECT_EQ(Info("log_level").choices, (std::vector<std::string>{"trace", "debug", "info", "warn", "error", "off"}));
  EXPECT_EQ(Info("post_mode").choices, (std::vector<std::string>{"auto", "direct", "progress"}));
  EXPECT_EQ(Info("write_completion").choices, (std::vector<std::string>{"delivery", "transmit"}));
  EXPECT_EQ(Info("close_connections").choices, (std::vector<std::string>{"auto", "on", "off"}));
  for (const char* f : {"log_level", "post_mode", "write_completion"}) EXPECT_EQ(Info(f).type, "Choice") << f;
}

TEST(SettingsTest, EveryChoiceRefusesOtherValuesNamingTheAllowedList) {
  int choices = 0;
  for (const auto& i : Settings::Table()) {
    if (i.type != "Choice") continue;
    ++choices;
    Settings s;
    std::string allowed;
    for (const auto& c : i.choices) allowed += (allowed.empty() ? "" : ", ") + c;
    for (const char* bad : {"bogus", "", "auto|direct", "progress2"}) {
      EXPECT_EQ(Refusal(&s, i.env, bad), i.env + "='" + bad + "': allowed values are " + allowed);
      EXPECT_EQ(s.Get(i.env), i.default_value) << i.env << " changed by a refused value";
    }
    for (const auto& c : i.choices) {
      ASSERT_TRUE(s.Set(i.field, c).ok()) << i.env << "=" << c;
      EXPECT_EQ(s.Get(i.env), c);
    }
  }
  EXPECT_EQ(choices, 9);
  Settings s;
  EXPECT_EQ(Refusal(&s, "KVF_POST_MODE", "directly"),
            "KVF_POST_MODE='directly': allowed values are auto, direct, progress");
  EXPECT_EQ(Refusal(&s, "KVF_LOG_LEVEL", "warning"),
            "KVF_LOG_LEVEL='warning': allowed values are trace, debug, info, warn, error, off");
  EXPECT_NE(Refusal(&s, "log_level", "critical"), "");  // spdlog knows it; kvfabric does not declare it
  EXPECT_EQ(Refusal(&s, "KVF_WRITE_COMPLETION", "complete"),
            "KVF_WRITE_COMPLETION='complete': allowed values are delivery, transmit");
}

TEST(SettingsTest, ChoicesMatchInAnyCaseAndAreStoredInLowerCase) {
  Settings s;
  ASSERT_TRUE(s.Set("KVF_POST_MODE", "Direct").ok());
  EXPECT_EQ(s.post_mode, "direct");
  ASSERT_TRUE(s.Set("post_mode", "PROGRESS").ok());
  EXPECT_EQ(s.post_mode, "progress");
  ASSERT_TRUE(s.Set("KVF_LOG_LEVEL", " Warn ").ok());  // surrounding blanks too
  EXPECT_EQ(s.log_level, "warn");
  ASSERT_TRUE(s.Set("KVF_WRITE_COMPLETION", "Transmit").ok());
  EXPECT_EQ(s.write_completion, "transmit");
  EXPECT_EQ(s.Get("KVF_WRITE_COMPLETION"), "transmit");
  // Booleans as well.
  ASSERT_TRUE(s.Set("KVF_CUDA", "OFF").ok());
  EXPECT_FALSE(s.cuda);
  ASSERT_TRUE(s.Set("KVF_CUDA", "True").ok());
  EXPECT_TRUE(s.cuda);
}

TEST(SettingsTest, NumbersBelowTheMinimumAreRefusedNamingIt) {
  Settings s;
  EXPECT_EQ(Refusal(&s, "KVF_STAGING_BYTES", "1048575"), "KVF_STAGING_BYTES='1048575': must be at least 1 MiB");
  EXPECT_EQ(Refusal(&s, "KVF_STAGING_BYTES", "-64M"), "KVF_STAGING_BYTES='-64M': must be at least 1 MiB");
  EXPECT_EQ(Refusal(&s, "KVF_STAGING_BYTES", "0"), "KVF_STAGING_BYTES='0': must be at least 1 MiB");
  EXPECT_EQ(s.staging_bytes, 64 * Settings::MiB);
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "0"),
            "KVF_TRANSFER_TIMEOUT_MS='0': must be between 1 ms and 86400 s");
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "-5"),
            "KVF_TRANSFER_TIMEOUT_MS='-5': must be between 1 ms and 86400 s");
  EXPECT_EQ(Refusal(&s, "KVF_HANDSHAKE_MAX_FRAME", "4095"),
            "KVF_HANDSHAKE_MAX_FRAME='4095': must be between 4 KiB and 1 GiB");
  EXPECT_EQ(Refusal(&s, "KVF_METADATA_LEASE_S", "1"), "KVF_METADATA_LEASE_S='1': must be between 2 s and 86400 s");
  EXPECT_EQ(Refusal(&s, "KVF_MAX_SLICE_BYTES", "4095"), "KVF_MAX_SLICE_BYTES='4095': must be 0 or at least 4 KiB");
  EXPECT_EQ(Refusal(&s, "KVF_MR_CHUNK_BYTES", "-1"), "KVF_MR_CHUNK_BYTES='-1': must be 0 or at least 4 KiB");
  EXPECT_EQ(Refusal(&s, "KVF_STRIPE_THRESHOLD", "4K"), "KVF_STRIPE_THRESHOLD='4K': must be 0 or at least 64 KiB");
  EXPECT_EQ(Refusal(&s, "KVF_RAIL_STALL_MS", "50"), "KVF_RAIL_STALL_MS='50': must be 0 or between 100 ms and 86400 s");
  EXPECT_EQ(Refusal(&s, "KVF_PROGRESS_THREADS", "-1"), "KVF_PROGRESS_THREADS='-1': must be between 0 and 64");
  EXPECT_EQ(Refusal(&s, "KVF_TX_DEPTH", "-1"), "KVF_TX_DEPTH='-1': must be at least 0");
  EXPECT_EQ(Refusal(&s, "KVF_CQ_SIZE", "-8"), "KVF_CQ_SIZE='-8': must be at least 0");
  EXPECT_EQ(Refusal(&s, "KVF_HANDSHAKE_MAX_CONNECTIONS", "0"),
            "KVF_HANDSHAKE_MAX_CONNECTIONS='0': must be between 2 and 4096");
  EXPECT_EQ(Refusal(&s, "KVF_PROGRESS_IDLE_US", "0"), "KVF_PROGRESS_IDLE_US='0': must be between 1 us and 1 s");
  // Maximums, and numbers beyond int64_t.
  EXPECT_EQ(Refusal(&s, "KVF_HANDSHAKE_MAX_FRAME", "2G"),
            "KVF_HANDSHAKE_MAX_FRAME='2G': must be between 4 KiB and 1 GiB");
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "86401s"),
            "KVF_TRANSFER_TIMEOUT_MS='86401s': must be between 1 ms and 86400 s");
  EXPECT_EQ(Refusal(&s, "KVF_STAGING_BYTES", "99999999999999999999"),
            "KVF_STAGING_BYTES='99999999999999999999' is too large");
  EXPECT_EQ(Refusal(&s, "KVF_STAGING_BYTES", "9223372036854775807K"),
            "KVF_STAGING_BYTES='9223372036854775807K' is too large");
  EXPECT_EQ(Refusal(&s, "KVF_TX_DEPTH", "99999999999999999999"), "KVF_TX_DEPTH='99999999999999999999' is too large");
  // The documented special values stay valid.
  for (const char* zero : {"KVF_MAX_SLICE_BYTES", "KVF_STRIPE_THRESHOLD", "KVF_RAIL_STALL_MS", "KVF_MR_CHUNK_BYTES",
                           "KVF_TX_DEPTH", "KVF_CQ_SIZE", "KVF_PROGRESS_THREADS", "KVF_PROGRESS_SPIN_US"})
    EXPECT_EQ(Refusal(&s, zero, "0"), "") << zero;
}

// Every bound as declared: the minimum (and maximum) is accepted, one past it
// is refused, except 0 where it is a special value.
TEST(SettingsTest, EveryNumericSettingHoldsItsDeclaredRange) {
  int numeric = 0;
  for (const auto& i : Settings::Table()) {
    if (i.type != "Int" && i.type != "Bytes" && i.type != "Duration") {
      EXPECT_FALSE(i.range.has_value()) << i.env;
      continue;
    }
    ++numeric;
    ASSERT_TRUE(i.range.has_value()) << i.env;
    const SettingRange r = *i.range;
    Settings s;
    EXPECT_EQ(Refusal(&s, i.env, std::to_string(r.minimum)), "") << i.env;
    const bool below_is_zero = r.zero_allowed && r.minimum - 1 == 0;
    EXPECT_EQ(Refusal(&s, i.env, std::to_string(r.minimum - 1)).empty(), below_is_zero) << i.env;
    if (r.zero_allowed) {
      EXPECT_EQ(Refusal(&s, i.env, "0"), "") << i.env;
    }
    if (r.has_maximum()) {
      EXPECT_EQ(Refusal(&s, i.env, std::to_string(r.maximum)), "") << i.env;
      EXPECT_NE(Refusal(&s, i.env, std::to_string(r.maximum + 1)), "") << i.env;
    }
    EXPECT_NE(Refusal(&s, i.env, "-1"), "") << i.env << ": no numeric setting takes a negative value";
    EXPECT_TRUE(s.Validate().ok()) << i.env;
  }
  EXPECT_EQ(numeric, 41);
}

TEST(SettingsTest, ByteSizesTakeBinarySuffixes) {
  Settings s;
  const std::pair<const char*, int64_t> cases[] = {
      {"4k", 4096},          {"4K", 4096},          {"4KiB", 4096},         {"4 KiB", 4096},
      {"4kib", 4096},        {"4Ki", 4096},         {"64M", 64 << 20},      {"64MiB", 64 << 20},
      {"64mib", 64 << 20},   {"1G", int64_t{1} << 30}, {"1GiB", int64_t{1} << 30}, {"2T", int64_t{2} << 40},
      {"64MB", 64 << 20},    {"8gb", int64_t{8} << 30}, {"4 KB", 4096},  // as the tools' size flags take them
      {"1048576", 1 << 20},  {"0x100000", 1 << 20}, {"3145728B", 3 << 20}, {" 2M ", 2 << 20}};
  for (const auto& [text, bytes] : cases) {
    ASSERT_EQ(Refusal(&s, "KVF_MR_CHUNK_BYTES", text), "") << text;
    EXPECT_EQ(s.mr_chunk_bytes, bytes) << text;
  }
  const std::string what =
      "' is not a byte size: use an integer with an optional suffix K, M, G or T (or KB, MB, GB, TB, or KiB, MiB, "
      "GiB, TiB; all powers of 1024, any case)";
  for (const char* bad : {"64 Q", "1.5G", "M", "", "64M64", "64 M B", "--1M", "64MiBs"})
    EXPECT_EQ(Refusal(&s, "KVF_MR_CHUNK_BYTES", bad), std::string("KVF_MR_CHUNK_BYTES='") + bad + what) << bad;
  EXPECT_EQ(s.mr_chunk_bytes, int64_t{2} << 20);
  ASSERT_EQ(Refusal(&s, "staging_bytes", "1g"), "");
  EXPECT_EQ(s.staging_bytes, int64_t{1} << 30);
  ASSERT_EQ(Refusal(&s, "max_slice_bytes", "8k"), "");
  EXPECT_EQ(s.max_slice_bytes, 8192);
  ASSERT_EQ(Refusal(&s, "handshake_max_frame", "1G"), "");
  EXPECT_EQ(s.handshake_max_frame, int64_t{1} << 30);
}

TEST(SettingsTest, DurationsConvertExactlyToTheDeclaredUnit) {
  Settings s;
  const std::tuple<const char*, const char*, int64_t> cases[] = {
      {"transfer_timeout_ms", "250", 250},          {"transfer_timeout_ms", "30s", 30000},
      {"transfer_timeout_ms", "1500ms", 1500},      {"transfer_timeout_ms", "2000000us", 2000},
      {"transfer_timeout_ms", "5 s", 5000},         {"transfer_timeout_ms", "7MS", 7},
      {"progress_spin_us", "1ms", 1000},            {"progress_spin_us", "0", 0},
      {"progress_spin_us", "250us", 250},           {"progress_idle_us", "1s", 1000000},
      {"progress_idle_us", "20\xc2\xb5s", 20},      {"metadata_lease_s", "2000ms", 2},
      {"metadata_lease_s", "30", 30},               {"metadata_lease_s", "3000000us", 3},
      {"rail_stall_ms", "0s", 0},                   {"handshake_timeout_ms", "1s", 1000}};
  for (const auto& [field, text, value] : cases) {
    ASSERT_EQ(Refusal(&s, field, text), "") << field << "=" << text;
    EXPECT_EQ(std::stoll(s.Get(field)), value) << field << "=" << text;  // Get: "30000ms"
  }
  EXPECT_EQ(s.transfer_timeout_ms, 7);
  EXPECT_EQ(s.progress_spin_us, 250);
  EXPECT_EQ(s.metadata_lease_s, 3);
  // Only exact conversions.
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "1500us"),
            "KVF_TRANSFER_TIMEOUT_MS='1500us' is not a whole number of milliseconds");
  EXPECT_EQ(Refusal(&s, "KVF_METADATA_LEASE_S", "2500ms"),
            "KVF_METADATA_LEASE_S='2500ms' is not a whole number of seconds");
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "1us"),
            "KVF_TRANSFER_TIMEOUT_MS='1us' is not a whole number of milliseconds");
  // Units it does not know, and no number.
  for (const char* bad : {"1m", "2 min", "1.5s", "s", "", "10 sec", "3h"})
    EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", bad),
              std::string("KVF_TRANSFER_TIMEOUT_MS='") + bad +
                  "' is not a duration: use an integer of milliseconds, or one with a unit us, ms or s")
        << bad;
  EXPECT_EQ(Refusal(&s, "KVF_PROGRESS_SPIN_US", "x"),
            "KVF_PROGRESS_SPIN_US='x' is not a duration: use an integer of microseconds, or one with a unit us, ms "
            "or s");
  // A conversion that lands outside the range names the range.
  EXPECT_EQ(Refusal(&s, "KVF_PROGRESS_SPIN_US", "2s"), "KVF_PROGRESS_SPIN_US='2s': must be between 0 and 1 s");
  EXPECT_EQ(Refusal(&s, "KVF_TRANSFER_TIMEOUT_MS", "9223372036854775807s"),
            "KVF_TRANSFER_TIMEOUT_MS='9223372036854775807s' is too large: must be at most 86400 s");
  EXPECT_EQ(s.transfer_timeout_ms, 7);
}

TEST(SettingsTest, GetShowsValuesInTheirUnitAndReadsBack) {
  Settings s;
  EXPECT_EQ(s.Get("KVF_STAGING_BYTES"), "64MiB");
  EXPECT_EQ(s.Get("stripe_threshold"), "256KiB");
  EXPECT_EQ(s.Get("KVF_HANDSHAKE_MAX_FRAME"), "16MiB");
  EXPECT_EQ(s.Get("KVF_MAX_SLICE_BYTES"), "0");
  EXPECT_EQ(s.Get("KVF_TRANSFER_TIMEOUT_MS"), "30000ms");
  EXPECT_EQ(s.Get("KVF_PROGRESS_SPIN_US"), "100us");
  EXPECT_EQ(s.Get("KVF_METADATA_LEASE_S"), "10s");
  EXPECT_EQ(s.Get("KVF_RAIL_STALL_MS"), "2000ms");
  EXPECT_EQ(s.Get("KVF_TX_DEPTH"), "0");
  EXPECT_EQ(s.Get("KVF_POST_MODE"), "auto");
  ASSERT_TRUE(s.Set("KVF_MAX_SLICE_BYTES", "5000").ok());
  EXPECT_EQ(s.Get("KVF_MAX_SLICE_BYTES"), "5000");
  ASSERT_TRUE(s.Set("KVF_STAGING_BYTES", "1536K").ok());
  EXPECT_EQ(s.Get("KVF_STAGING_BYTES"), "1536KiB");
  EXPECT_EQ(s.Get("KVF_NO_SUCH"), "");
  // The secret stays masked.
  EXPECT_EQ(s.Get("KVF_AUTH_TOKEN"), "");
  ASSERT_TRUE(s.Set("KVF_AUTH_TOKEN", "s3cret").ok());
  EXPECT_EQ(s.Get("KVF_AUTH_TOKEN"), "(set)");
  EXPECT_EQ(s.Get("auth_token"), "(set)");
  // What Get shows, Set takes back unchanged (kvfabric-settings' output can
  // be pasted into an environment).
  ASSERT_TRUE(s.Set("KVF_TRANSFER_TIMEOUT_MS", "45s").ok());
  ASSERT_TRUE(s.Set("KVF_POST_MODE", "Progress").ok());
  for (const auto& i : Settings::Table()) {
    if (i.env == "KVF_AUTH_TOKEN") continue;
    Settings t = s;
    const std::string shown = s.Get(i.env);
    ASSERT_TRUE(t.Set(i.env, shown).ok()) << i.env << "=" << shown;
    EXPECT_EQ(t.Get(i.env), shown) << i.env;
  }
}

TEST(SettingsTest, TableCarriesUnitsAndRanges) {
  EXPECT_EQ(Info("staging_bytes").type, "Bytes");
  EXPECT_EQ(Info("staging_bytes").unit, "bytes");
  ASSERT_TRUE(Info("staging_bytes").range.has_value());
  EXPECT_EQ(Info("staging_bytes").range->minimum, Settings::MiB);
  EXPECT_FALSE(Info("staging_bytes").range->has_maximum());
  EXPECT_EQ(Info("staging_bytes").values, "bytes, ≥ 1 MiB");
  EXPECT_EQ(Info("max_slice_bytes").values, "bytes, 0 or ≥ 4 KiB");
  EXPECT_TRUE(Info("max_slice_bytes").range->zero_allowed);
  EXPECT_EQ(Info("transfer_timeout_ms").type, "Duration");
  EXPECT_EQ(Info("transfer_timeout_ms").unit, "milliseconds");
  EXPECT_EQ(Info("transfer_timeout_ms").values, "milliseconds, 1 ms to 86400 s");
  EXPECT_EQ(Info("rail_stall_ms").values, "milliseconds, 0 or 100 ms to 86400 s");
  EXPECT_EQ(Info("progress_spin_us").unit, "microseconds");
  EXPECT_EQ(Info("metadata_lease_s").unit, "seconds");
  EXPECT_EQ(Info("metadata_lease_s").range->minimum, 2);
  EXPECT_EQ(Info("handshake_max_connections").values, "integer, 2 to 4096");
  EXPECT_EQ(Info("tx_depth").values, "integer, ≥ 0");
  EXPECT_EQ(Info("post_mode").values, "`auto`, `direct`, `progress`");
  EXPECT_EQ(Info("auth_token").type, "String");
  EXPECT_FALSE(Info("auth_token").range.has_value());
  EXPECT_TRUE(Info("auth_token").choices.empty());
  // The byte sizes and durations are typed as such: each value takes a unit.
  for (const char* f :
       {"staging_bytes", "max_slice_bytes", "stripe_threshold", "mr_chunk_bytes", "handshake_max_frame"})
    EXPECT_EQ(Info(f).type, "Bytes") << f;
  for (const char* f : {"transfer_timeout_ms", "rail_stall_ms", "rail_retry_ms", "handshake_timeout_ms",
                        "metadata_lease_s", "progress_spin_us", "progress_idle_us"})
    EXPECT_EQ(Info(f).type, "Duration") << f;
}

TEST(SettingsTest, ValidateChecksFieldsAssignedInCode) {
  Settings s;
  EXPECT_TRUE(s.Validate().ok());
  s.post_mode = "Direct";  // not through Set: kept as written
  Status st = s.Validate();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "KVF_POST_MODE='Direct': allowed values are auto, direct, progress");
  s.post_mode = "direct";
  s.staging_bytes = 1000;
  EXPECT_EQ(s.Validate().message(), "KVF_STAGING_BYTES='1000': must be at least 1 MiB");
  s.staging_bytes = 2 * Settings::MiB;
  s.transfer_timeout_ms = 0;
  EXPECT_EQ(s.Validate().message(), "KVF_TRANSFER_TIMEOUT_MS='0ms': must be between 1 ms and 86400 s");
  s.transfer_timeout_ms = 1;
  s.handshake_max_connections = 0;
  EXPECT_EQ(s.Validate().message(), "KVF_HANDSHAKE_MAX_CONNECTIONS='0': must be between 2 and 4096");
  s.handshake_max_connections = 2;
  EXPECT_TRUE(s.Validate().ok());
}

TEST(SettingsTest, EnvironmentWithABadChoiceOrSizeChangesNothing) {
  setenv("KVF_PROGRESS_THREADS", "3", 1);
  setenv("KVF_STAGING_BYTES", "128M", 1);
  setenv("KVF_POST_MODE", "sideways", 1);
  Settings s;
  Status st = s.ApplyEnvironment();
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "KVF_POST_MODE='sideways': allowed values are auto, direct, progress");
  EXPECT_EQ(s.progress_threads, 1);
  EXPECT_EQ(s.staging_bytes, 64 * Settings::MiB);
  EXPECT_EQ(s.post_mode, "auto");
  setenv("KVF_POST_MODE", "Progress", 1);
  setenv("KVF_TRANSFER_TIMEOUT_MS", "-5", 1);
  st = s.ApplyEnvironment();
  EXPECT_NE(st.message().find("KVF_TRANSFER_TIMEOUT_MS='-5': must be between 1 ms"), std::string::npos)
      << st.ToString();
  EXPECT_EQ(s.progress_threads, 1);
  EXPECT_EQ(s.post_mode, "auto");
  setenv("KVF_TRANSFER_TIMEOUT_MS", "2s", 1);
  ASSERT_TRUE(s.ApplyEnvironment().ok());
  EXPECT_EQ(s.progress_threads, 3);
  EXPECT_EQ(s.staging_bytes, 128 * Settings::MiB);
  EXPECT_EQ(s.post_mode, "progress");
  EXPECT_EQ(s.transfer_timeout_ms, 2000);
  for (const char* v : {"KVF_PROGRESS_THREADS", "KVF_STAGING_BYTES", "KVF_POST_MODE", "KVF_TRANSFER_TIMEOUT_MS"})
    unsetenv(v);
}

TEST(SettingsTest, MarkdownTableShowsAllowedValuesAndUnits) {
  const std::string md = Settings::MarkdownTable();
  EXPECT_EQ(md.rfind("| Variable | Type | Default | Values | Meaning |\n", 0), 0u);
  EXPECT_NE(md.find("| `KVF_POST_MODE` | Choice | `auto` | `auto`, `direct`, `progress` | "), std::string::npos);
  EXPECT_NE(md.find("| `KVF_LOG_LEVEL` | Choice | `info` | `trace`, `debug`, `info`, `warn`, `error`, `off` | "),
            std::string::npos);
  EXPECT_NE(md.find("| `KVF_WRITE_COMPLETION` | Choice | `delivery` | `delivery`, `transmit` | "), std::string::npos);
  EXPECT_NE(md.find("| `KVF_STAGING_BYTES` | Bytes | `64MiB` | bytes, ≥ 1 MiB | "), std::string::npos);
  EXPECT_NE(md.find("| `KVF_MAX_SLICE_BYTES` | Bytes | `0` | bytes, 0 or ≥ 4 KiB | "), std::string::npos);
  EXPECT_NE(md.find("| `KVF_TRANSFER_TIMEOUT_MS` | Duration | `30000ms` | milliseconds, 1 ms to 86400 s | "),
            std::string::npos);
  EXPECT_NE(md.find("| `KVF_METADATA_LEASE_S` | Duration | `10s` | seconds, 2 s to 86400 s | "), std::string::npos);
  EXPECT_NE(md.find("| `KVF_TX_DEPTH` | Int | `0` | integer, ≥ 0 | "), std::string::npos);
  for (const auto& i : Settings::Table()) EXPECT_NE(md.find("| `" + i.env + "` |"), std::string::npos) << i.env;
}

// docs/settings.md is generated from the declaration; it must not drift.
TEST(SettingsTest, DocsAreGeneratedFromTheDeclaration) {
  std::ifstream f(std::string(KVF_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(f.good()) << "docs/settings.md missing: run `make docs`";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find(Settings::MarkdownTable()), std::string::npos)
      << "docs/settings.md is stale: run `make docs`";
}

}  // namespace
}  // namespace kvfabric
