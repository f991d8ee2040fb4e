// kdist::ArrayDataset: in-memory examples with labels or float targets; every size that does not
// add up is a ValueError that says what was expected.
#include <gtest/gtest.h>

#include <kdist/nn/array_dataset.hpp>
#include <optional>
#include <span>
#include <vector>

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no kdist::ValueError";
  return {};
}

TEST(ArrayDataset, HoldsExamplesWithLabelsOrTargets) {
  const kdist::ArrayDataset<float> labelled(std::vector<float>(3 * 4, 1.0f), {2, 2, 1}, {0, 2, 1});
  EXPECT_EQ(labelled.size(), 3u);
  EXPECT_EQ(labelled.example_size(), 4u);
  EXPECT_TRUE(labelled.has_labels());
  EXPECT_EQ(labelled.labels()[1], 2);
  std::vector<double> x{0, 1, 2, 3, 4, 5};
  const kdist::ArrayDataset<double> regression(x, {3}, {10, 11, 12, 13}, 2);
  EXPECT_EQ(regression.size(), 2u);
  EXPECT_FALSE(regression.has_labels());
  EXPECT_EQ(regression.target_width(), 2u);
  EXPECT_EQ(regression.example(1)[0], 3.0);
  EXPECT_EQ(regression.target(1)[1], 13.0);
}

TEST(ArrayDataset, SizesThatDoNotAddUpAreValueErrors) {
  EXPECT_EQ(error_of([] {
              kdist::ArrayDataset<float>(std::vector<float>(10), {28, 28, 1}, {0, 1, 2, 3});
            }),
            "kdist::ArrayDataset: x holds 10 values but 4 labels need 4 examples of shape (28, 28, "
            "1) (3136 values)");
  EXPECT_EQ(error_of([] { kdist::ArrayDataset<float>({}, {4}, std::vector<std::int32_t>{}); }),
            "kdist::ArrayDataset: no examples (0 labels)");
  EXPECT_EQ(error_of([] {
              kdist::ArrayDataset<float>(std::vector<float>(2), {}, {0, 1});
            }),
            "kdist::ArrayDataset: the example shape is (); give the shape of one example, e.g. "
            "{28, 28, 1} or {784}");
  EXPECT_EQ(error_of([] {
              kdist::ArrayDataset<float>(std::vector<float>(2), {0}, {0, 1});
            }),
            "kdist::ArrayDataset: the example shape (0,) holds no values");
  EXPECT_EQ(
      error_of([] {
        kdist::ArrayDataset<float>(std::vector<float>(4), {1}, {0, 1, 2, -1});
      }),
      "kdist::ArrayDataset: label -1 of example 3 is negative; labels are class ids 0, 1, ...");
  EXPECT_EQ(error_of([] {
              kdist::ArrayDataset<float>(std::vector<float>(4), {1}, std::vector<float>(4), 0);
            }),
            "kdist::ArrayDataset: target_width is 0; each example needs >= 1 target");
  EXPECT_EQ(error_of([] {
              kdist::ArrayDataset<float>(std::vector<float>(4), {1}, std::vector<float>(7), 2);
            }),
            "kdist::ArrayDataset: 7 target values are not whole rows of target_width 2");
  EXPECT_EQ(
      error_of(
          [] { kdist::ArrayDataset<float>(std::vector<float>(4), {1}, std::vector<float>(6), 2); }),
      "kdist::ArrayDataset: x holds 4 values but 3 target rows need 3 examples of shape (1,) (3 "
      "values)");
}

// Zero-copy input: a borrowed dataset reads the caller's memory, not a copy of it.
TEST(ArrayDataset, BorrowedReadsTheCallersMemoryWithoutCopying) {
  std::vector<float> x{0, 1, 2, 3, 4, 5};
  std::vector<float> y{10, 11, 12};
  const auto d = kdist::ArrayDataset<float>::borrow(x, {2}, y, 1);
  EXPECT_TRUE(d.borrowed());
  EXPECT_FALSE(d.has_labels());
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.example(1), x.data() + 2);  // the caller's memory itself
  EXPECT_EQ(d.target(2), y.data() + 2);
  x[4] = 40;  // what the caller writes, the dataset reads
  EXPECT_EQ(d.example(2)[0], 40.0f);
  std::vector<std::int32_t> labels{2, 0, 1};
  const auto labelled = kdist::ArrayDataset<float>::borrow(x, {2}, labels);
  EXPECT_TRUE(labelled.has_labels());
  EXPECT_EQ(labelled.labels().data(), labels.data());
  const kdist::ArrayDataset<float> copy = labelled;  // copies borrow the same memory
  EXPECT_EQ(copy.example(0), x.data());
  const kdist::ArrayDataset<float> owned(x, {2}, labels);
  EXPECT_FALSE(owned.borrowed());
  EXPECT_NE(owned.example(0), x.data());
}

// An owning dataset's copy holds its own values: nothing points into the original.
TEST(ArrayDataset, CopiesOfAnOwningDatasetOutliveIt) {
  std::optional<kdist::ArrayDataset<float>> original(
      kdist::ArrayDataset<float>(std::vector<float>{1, 2, 3, 4}, {2}, std::vector<float>{5, 6}, 1));
  const kdist::ArrayDataset<float> copy = *original;
  original.reset();
  EXPECT_EQ(copy.example(1)[1], 4.0f);
  EXPECT_EQ(copy.target(1)[0], 6.0f);
}

TEST(ArrayDataset, BorrowedSizesThatDoNotAddUpAreValueErrors) {
  const std::vector<float> x(10);
  const std::vector<std::int32_t> labels{0, 1, 2, 3};
  EXPECT_EQ(error_of([&] {
              (void)kdist::ArrayDataset<float>::borrow(x, {28, 28, 1}, labels);
            }),
            "kdist::ArrayDataset: x holds 10 values but 4 labels need 4 examples of shape (28, 28, "
            "1) (3136 values)");
  const std::vector<std::int32_t> negative{0, -1};
  EXPECT_EQ(
      error_of([&] {
        (void)kdist::ArrayDataset<float>::borrow(std::span<const float>(x.data(), 2), {1},
                                                 negative);
      }),
      "kdist::ArrayDataset: label -1 of example 1 is negative; labels are class ids 0, 1, ...");
  const std::vector<float> targets(7);
  EXPECT_EQ(error_of([&] { (void)kdist::ArrayDataset<float>::borrow(x, {1}, targets, 2); }),
            "kdist::ArrayDataset: 7 target values are not whole rows of target_width 2");
  EXPECT_EQ(error_of([&] { (void)kdist::ArrayDataset<float>::borrow(x, {1}, targets, 0); }),
            "kdist::ArrayDataset: target_width is 0; each example needs >= 1 target");
}

}  // namespace
