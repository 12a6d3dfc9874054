#pragma once
// Test support shared by every suite: exact element values, bitwise
// comparison, per-rank reports that are safe to fill from any thread.

#include <polycoll/polycoll.hpp>

#include <bit>
#include <complex>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace polycoll::test {

// Largest m such that the integers 0..m are all exact in T.
template <class T>
constexpr std::int64_t exact_range() {
  if constexpr (std::is_same_v<T, bool>) return 1;
  else if constexpr (std::is_same_v<T, f8e5m2>) return 8;
  else if constexpr (std::is_same_v<T, f8e4m3>) return 16;
  else if constexpr (std::is_same_v<T, bf16>) return 256;
  else if constexpr (std::is_same_v<T, f16>) return 2048;
  else if constexpr (std::is_same_v<T, std::int8_t>) return 127;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return 255;
  else if constexpr (std::is_same_v<T, std::int16_t>) return 32767;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return 65535;
  else return 1 << 20;
}

template <class T>
inline constexpr bool is_complex_v = false;
template <class T>
inline constexpr bool is_complex_v<std::complex<T>> = true;

template <class T>
inline constexpr bool is_narrow_float_v =
    std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, f8e4m3> || std::is_same_v<T, f8e5m2>;

// T from an exact double (and imaginary part for complex).
template <class T>
T make(double re, double im = 0.0) {
  if constexpr (is_complex_v<T>) return T(static_cast<typename T::value_type>(re), static_cast<typename T::value_type>(im));
  else if constexpr (std::is_same_v<T, bool>) return re != 0.0;
  else if constexpr (is_narrow_float_v<T>) return T(static_cast<float>(re));
  else return static_cast<T>(re);
}

template <class T>
std::complex<double> value_of(T v) {
  if constexpr (is_complex_v<T>) return {static_cast<double>(v.real()), static_cast<double>(v.imag())};
  else if constexpr (is_narrow_float_v<T>) return {static_cast<double>(static_cast<float>(v)), 0.0};
  else return {static_cast<double>(v), 0.0};
}

// Bitwise equality (what the conformance suite demands for exact values).
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, bool>) return a == b;
  else return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
std::string show(const T& v) {
  const auto c = value_of(v);
  std::string s = std::to_string(c.real());
  if constexpr (is_complex_v<T>) s += (c.imag() < 0 ? "" : "+") + std::to_string(c.imag()) + "i";
  return s;
}

// A value-initialised array of T. Used instead of std::vector, whose bool
// specialisation packs bits and so is not a buffer of bool elements.
template <class T>
class Array {
 public:
  Array() = default;
  explicit Array(std::size_t n) : data_(n ? new T[n]() : nullptr), size_(n) {}
  Array(const Array& o) : Array(o.size_) { std::copy(o.begin(), o.end(), begin()); }
  Array& operator=(const Array& o) {
    if (this != &o) *this = Array(o);
    return *this;
  }
  Array(Array&&) noexcept = default;
  Array& operator=(Array&&) noexcept = default;
  T* data() noexcept { return data_.get(); }
  const T* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  std::uint64_t address() const noexcept { return detail::to_address(data_.get()); }

 private:
  std::unique_ptr<T[]> data_;
  std::size_t size_ = 0;
};

// A fixture buffer in host memory.
template <class T>
struct HostBuffer {
  Array<T> data;
  explicit HostBuffer(std::size_t n) : data(n) {}
  std::uint64_t address() const noexcept { return data.address(); }
  void write(const Array<T>& a) { std::copy(a.begin(), a.end(), data.begin()); }
  Array<T> read() const { return data; }
};

// What one rank saw. Filled by that rank's thread only; inspected by the test
// thread after the ranks joined (Catch2's assertions are not thread-safe).
struct Report {
  std::size_t rank = 0;
  std::size_t world = 0;
  std::vector<std::string> failures;
  std::size_t checks = 0;

  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok && failures.size() < 20) failures.push_back(what);
  }
  void expect_ok(const Status& s, const std::string& what) {
    ++checks;
    if (!s && failures.size() < 20) failures.push_back(what + ": " + s.error().message);
  }
  template <class T>
  void expect_equal(const Array<T>& got, const Array<T>& want, const std::string& what) {
    ++checks;
    if (got.size() != want.size()) {
      failures.push_back(what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
      return;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!same(got[i], want[i])) {
        if (failures.size() < 20)
          failures.push_back(what + ": element " + std::to_string(i) + " is " + show(got[i]) + ", expected " +
                             show(want[i]));
        return;
      }
    }
  }
};

}  // namespace polycoll::test
