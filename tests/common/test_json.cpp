#include <gtest/gtest.h>

#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "test_util.h"

namespace fleet {
namespace {

using testing::error_of;

const char* kPlan = R"({"stages": [{"layers": [0, 12], "gpu": "A100-40", "tp": 4},
                                   {"layers": [12, 26], "gpu": "V100-16", "tp": 2.0}],
                        "mbs": 8, "name": "p", "price": 3.5, "ok": true, "a/b": {"c~d": 1}})";

TEST(Json, TypedAccessWithDefaults) {
  const JsonDocument doc = parse_json(kPlan, "plan.json");
  const JsonValue root = doc.root();
  EXPECT_EQ(root.get<int>("mbs"), 8);
  EXPECT_EQ(root.get<std::string>("name"), "p");
  EXPECT_DOUBLE_EQ(root.get<double>("price"), 3.5);
  EXPECT_TRUE(root.get<bool>("ok"));
  EXPECT_EQ(root.get_or<int>("missing", 7), 7);
  EXPECT_EQ(root.at("stages").at(1).get<int>("tp"), 2);  // integral float accepted
  EXPECT_EQ(root.at("stages").at(0).get<std::vector<int>>("layers"), (std::vector<int>{0, 12}));
  EXPECT_EQ(root.at("stages").size(), 2u);
  EXPECT_EQ(root.at("a/b").at("c~d").path(), "/a~1b/c~0d");
}

TEST(Json, ErrorsNameFileAndPath) {
  const JsonDocument doc = parse_json(kPlan, "plan.json");
  const JsonValue root = doc.root();
  EXPECT_EQ(error_of([&] { root.at("stages").at(1).get<int>("dp"); }), "plan.json: /stages/1: missing field 'dp'");
  EXPECT_EQ(error_of([&] { root.at("stages").at(0).get<int>("gpu"); }),
            "plan.json: /stages/0/gpu: expected an integer, got string");
  EXPECT_EQ(error_of([&] { root.get<int>("price"); }), "plan.json: /price: expected an integer, got 3.5");
  EXPECT_EQ(error_of([&] { root.at("stages").at(5); }), "plan.json: /stages: index 5 is past the end (2 elements)");
  EXPECT_EQ(error_of([&] { root.at("mbs").at("x"); }), "plan.json: /mbs: expected an object, got number");
  EXPECT_EQ(error_of([&] { root.get<std::uint8_t>("mbs"); }), "no error");
  EXPECT_EQ(error_of([&] { parse_json(R"({"n": -1})", "f").root().get<unsigned>("n"); }),
            "f: /n: expected a non-negative integer, got -1");
  EXPECT_EQ(error_of([&] { parse_json(R"({"n": 300})", "f").root().get<std::int8_t>("n"); }),
            "f: /n: integer 300 is out of range");
}

TEST(Json, RejectsUnknownKeys) {
  const JsonDocument doc = parse_json(R"({"gbs": 1, "mbz": 2})", "job.json");
  EXPECT_EQ(error_of([&] {
              doc.root().reject_unknown_keys({"gbs", "mbs"});
            }),
            "job.json: /mbz: unknown field 'mbz' (expected one of: gbs, mbs)");
}

TEST(Json, SyntaxErrorCarriesTheByteOffset) {
  try {
    parse_json("{\"a\": 1,\n \"b\": }", "bad.json");
    FAIL();
  } catch (const InputError& e) {
    ASSERT_TRUE(e.context().offset.has_value());
    EXPECT_EQ(*e.context().offset, 15u);  // the '}' where a value should be
    EXPECT_NE(std::string(e.what()).find("bad.json: at byte 15: malformed JSON"), std::string::npos) << e.what();
  }
}

TEST(Json, FileRoundTripAndMissingFile) {
  testing::TempDir dir;
  write_json_file(dir / "x.json", nlohmann::json{{"k", {1, 2, 3}}});
  EXPECT_EQ(load_json_file(dir / "x.json").root().get<std::vector<int>>("k"), (std::vector<int>{1, 2, 3}));
  EXPECT_THROW(load_json_file(dir / "nope.json"), InputError);
  EXPECT_THROW(load_json_file(dir.path()), InputError);  // a folder
}

}  // namespace
}  // namespace fleet
