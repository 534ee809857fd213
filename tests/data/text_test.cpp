#include "lockstep/data/text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "file_test_util.h"
#include "lockstep/data/bytes.h"

namespace lockstep {
namespace {

using testing_data::data_loss_message;

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_data::ScratchDir;
using S = std::vector<std::string>;
using Rows = std::vector<S>;

S lines_of(const Dataset& ds) {
  S out;
  for (Element& e : ds) out.push_back(bytes_string(e.at(0)));
  return out;
}

class TextLine : public ScratchDir {};

TEST_F(TextLine, SplitsLinesAcrossFilesAndStripsCrLf) {
  std::string a = write("a.txt", "one\r\ntwo\n\nlast without newline");
  std::string b = write("b.txt", "x\n");
  EXPECT_EQ(lines_of(TextLineDataset({a, b})), (S{"one", "two", "", "last without newline", "x"}));
}

TEST_F(TextLine, ReadsGzipFromZlib) {
  std::string p = path("a.txt.gz");
  gzFile f = gzopen(p.c_str(), "wb");
  gzputs(f, "alpha\nbeta\n");
  gzclose(f);
  EXPECT_EQ(lines_of(TextLineDataset({p}, "GZIP")), (S{"alpha", "beta"}));
}

TEST_F(TextLine, OverlongLineNamesFileAndLine) {
  std::string p = write("a.txt", "ok\n" + std::string(100, 'x') + "\n");
  std::string msg = data_loss_message([&] { lines_of(TextLineDataset({p}, "", 0, 50)); });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("line 2")));
}

TEST(ParseCsv, QuotingEmbeddedDelimitersNewlinesAndEmptyFields) {
  EXPECT_EQ(parse_csv("a,\"b,c\",\"say \"\"hi\"\"\"\n,,\n\"multi\nline\",x,\"\"\r\n"),
            (Rows{{"a", "b,c", "say \"hi\""}, {"", "", ""}, {"multi\nline", "x", ""}}));
  EXPECT_EQ(parse_csv("a;b\n", CsvFormat{.field_delim = ';'}), (Rows{{"a", "b"}}));
  EXPECT_EQ(parse_csv("\"a\",b\n", CsvFormat{.use_quote_delim = false}), (Rows{{"\"a\"", "b"}}));
}

TEST(ParseCsv, BadQuotingIsDataLossNamingTheLine) {
  EXPECT_THAT(data_loss_message([] { parse_csv("ok\n\"open\n\nnever closed", {}, "f.csv"); }),
              AllOf(HasSubstr("f.csv"), HasSubstr("line 2"), HasSubstr("not closed")));
  EXPECT_THAT(data_loss_message([] { parse_csv("a\nb\"c\n", {}, "f.csv"); }), HasSubstr("line 2"));
  EXPECT_THAT(data_loss_message([] { parse_csv("\"a\"b\n", {}, "f.csv"); }), HasSubstr("line 1"));
}

class Csv : public ScratchDir {};

TEST_F(Csv, TypesDefaultsHeaderAndSelectedColumns) {
  std::string p = write("a.csv", "id,name,score,weight\n1,\"Smith, J\",2.5,7\n2,,,NA\n");
  CsvDataset ds({p},
                {{CsvType::int64},
                 {CsvType::string, "?"},
                 {CsvType::float32, "-1"},
                 {CsvType::float64, "0.5"}},
                CsvOptions{.header = true, .format = {.na_value = "NA"}});
  std::vector<Element> rows;
  for (Element& e : ds) rows.push_back(e);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0].item(), 1);
  EXPECT_EQ(bytes_string(rows[0][1]), "Smith, J");
  EXPECT_EQ(rows[0][2].item(), 2.5);
  EXPECT_EQ(rows[0][3].item(), 7);
  EXPECT_EQ(bytes_string(rows[1][1]), "?");
  EXPECT_EQ(rows[1][2].item(), -1);
  EXPECT_EQ(rows[1][3].item(), 0.5);
  EXPECT_EQ(ds.element_spec()[0], (TensorSpec{{}, DType::int64}));

  CsvDataset sel({p}, {{CsvType::int32}, {CsvType::float32, "0"}},
                 CsvOptions{.header = true, .select_cols = {0, 2}});
  std::vector<double> got;
  for (Element& e : sel) got.insert(got.end(), {e[0].item(), e[1].item()});
  EXPECT_EQ(got, (std::vector<double>{1, 2.5, 2, 0}));
}

TEST_F(Csv, WrongFieldCountNamesFileAndLine) {
  std::string p = write("bad.csv", "1,2\n3,4\n5\n");
  std::string msg = data_loss_message([&] {
    for (Element& e : CsvDataset({p}, {{CsvType::int64}, {CsvType::int64}})) (void)e;
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("line 3"), HasSubstr("expected 2 fields"),
                         HasSubstr("received 1")));
}

TEST_F(Csv, MissingRequiredAndNonNumbersNameFileAndLine) {
  std::string p = write("bad.csv", "1,2\n,4\n");
  EXPECT_THAT(data_loss_message([&] {
                for (Element& e : CsvDataset({p}, {{CsvType::int64}, {CsvType::int64}})) (void)e;
              }),
              AllOf(HasSubstr(p), HasSubstr("line 2"), HasSubstr("no default")));
  std::string q = write("nan.csv", "1,2x\n");
  EXPECT_THAT(data_loss_message([&] {
                for (Element& e : CsvDataset({q}, {{CsvType::int64}, {CsvType::float32}})) (void)e;
              }),
              AllOf(HasSubstr(q), HasSubstr("line 1"), HasSubstr("\"2x\" is not a float32")));
}

TEST_F(Csv, MakeCsvDatasetStacksFeaturesAndSplitsTheLabel) {
  write("p0.csv", "a,label,b\n1,0,2\n3,1,\n");
  write("p1.csv", "a,label,b\n5,2,6\n");
  auto [ds, names] = make_csv_dataset(
      path("p*.csv"),
      MakeCsvOptions{.batch_size = 2, .label_name = "label", .num_epochs = 1, .shuffle = false});
  EXPECT_EQ(names, (S{"a", "b"}));
  std::vector<Element> batches;
  for (Element& e : ds) batches.push_back(e);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0][0].to_vector<float>(), (std::vector<float>{1, 2, 3, 0}));
  EXPECT_EQ(batches[0][1].to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(batches[1][0].to_vector<float>(), (std::vector<float>{5, 6}));
  auto [sel, sel_names] =
      make_csv_dataset(path("p0.csv"), MakeCsvOptions{.batch_size = 8,
                                                      .label_name = "label",
                                                      .select_columns = {"b", "a"},
                                                      .num_epochs = 1,
                                                      .shuffle = false});
  EXPECT_EQ(sel_names, (S{"b", "a"}));
  for (Element& e : sel) EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{2, 1, 0, 3}));
  EXPECT_THROW(make_csv_dataset(path("p0.csv"), MakeCsvOptions{.label_name = "nope"}),
               InvalidArgument);
}

TEST_F(Csv, RestoredIteratorContinuesMidFile) {
  std::string p = write("a.csv", "0\n1\n2\n3\n");
  CsvDataset ds({p}, {{CsvType::int64}});
  Iterator it = ds.make_iterator();
  Element e;
  it.next(e);
  it.next(e);
  Iterator resumed = ds.make_iterator(it.state());
  ASSERT_TRUE(resumed.next(e));
  EXPECT_EQ(e[0].item(), 2);
}

}  // namespace
}  // namespace lockstep
