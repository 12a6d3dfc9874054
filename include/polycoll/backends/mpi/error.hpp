#pragma once
// The Mpi backend's one check helper: an MPI return code becomes an Errc and
// a text "MPI_ERR_TRUNCATE: <MPI_Error_string>". Internal to backends/mpi.hpp.

#include <string>
#include <string_view>

#include <mpi.h>

#include <polycoll/detail/text.hpp>
#include <polycoll/error.hpp>

namespace polycoll::detail::mpi {

/// The error class of `code` (MPI_SUCCESS for success), or the code itself if
/// MPI cannot classify it (which only an invalid code causes).
inline int error_class(int code) noexcept {
  int cls = code;
  if (MPI_Error_class(code, &cls) != MPI_SUCCESS) return code;
  return cls;
}

/// Name of an MPI error class ("MPI_ERR_TRUNCATE"), for the classes a
/// collective library meets; empty for others.
inline std::string_view class_name(int cls) noexcept {
  struct Entry {
    int cls;
    std::string_view name;
  };
  const Entry table[] = {
      {MPI_ERR_BUFFER, "MPI_ERR_BUFFER"},     {MPI_ERR_COUNT, "MPI_ERR_COUNT"},
      {MPI_ERR_TYPE, "MPI_ERR_TYPE"},         {MPI_ERR_TAG, "MPI_ERR_TAG"},
      {MPI_ERR_COMM, "MPI_ERR_COMM"},         {MPI_ERR_RANK, "MPI_ERR_RANK"},
      {MPI_ERR_REQUEST, "MPI_ERR_REQUEST"},   {MPI_ERR_ROOT, "MPI_ERR_ROOT"},
      {MPI_ERR_GROUP, "MPI_ERR_GROUP"},       {MPI_ERR_OP, "MPI_ERR_OP"},
      {MPI_ERR_ARG, "MPI_ERR_ARG"},           {MPI_ERR_UNKNOWN, "MPI_ERR_UNKNOWN"},
      {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"}, {MPI_ERR_OTHER, "MPI_ERR_OTHER"},
      {MPI_ERR_INTERN, "MPI_ERR_INTERN"},     {MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS"},
      {MPI_ERR_PENDING, "MPI_ERR_PENDING"},   {MPI_ERR_NO_MEM, "MPI_ERR_NO_MEM"},
  };
  for (const auto& e : table) {
    if (e.cls == cls) return e.name;
  }
  return {};
}

/// "MPI_ERR_TRUNCATE: message truncated" (Open MPI's strings already start
/// with the class name; MPICH's do not, so it is prefixed once).
inline std::string error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) len = 0;
  std::string_view text(buf, static_cast<std::size_t>(len > 0 ? len : 0));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  const std::string_view cls = class_name(error_class(code));
  if (text.empty()) return cat(cls.empty() ? std::string_view("MPI error") : cls, " (code ", code, ')');
  if (cls.empty() || text.substr(0, cls.size()) == cls) return std::string(text);
  return cat(cls, ": ", text);
}

/// The polycoll code for an MPI error code.
inline Errc errc_of(int code) noexcept {
  const int cls = error_class(code);
  if (cls == MPI_ERR_TRUNCATE) return Errc::truncated;
  return Errc::backend_failure;
}

}  // namespace polycoll::detail::mpi
