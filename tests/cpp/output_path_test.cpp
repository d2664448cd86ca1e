// common/output_path.h: the one policy for user-named output files, on real
// files, links, FIFOs and SQLite databases in a temporary directory.
#include "common/output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

namespace fs = std::filesystem;
using kiln::catalog_files;
using kiln::check_catalog_file;
using kiln::check_output_file;

namespace {

class OutputPath : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("kiln_output_path_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    db = dir / "kiln.db";
    write(db, std::string("SQLite format 3\0", 16) + std::string(100, 'x'));
  }
  void TearDown() override { fs::remove_all(dir); }
  static void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
  std::string refusal(const fs::path& p, const std::vector<fs::path>& protect) {
    try {
      check_output_file(p, "--out", protect);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir, db;
};

TEST_F(OutputPath, CatalogFilesNameTheSidecarsAsGivenAndResolved) {
  fs::create_symlink(db, dir / "link.db");
  const auto files = catalog_files(dir / "link.db");
  EXPECT_EQ(files.size(), 8u);
  EXPECT_NE(std::find(files.begin(), files.end(), fs::path(dir / "link.db-wal")), files.end());
  EXPECT_NE(std::find(files.begin(), files.end(), fs::path(db.string() + "-journal")), files.end());
}

TEST_F(OutputPath, RefusesTheCatalogAndItsSidecarsWhetherOrNotTheyExist) {
  const auto protect = catalog_files(db);
  for (const char* s : {"", "-wal", "-shm", "-journal"}) {
    const std::string m = refusal(db.string() + s, protect);
    EXPECT_NE(m.find("catalog"), std::string::npos) << s;
    EXPECT_NE(m.find("kiln.db" + std::string(s)), std::string::npos) << m;
  }
  EXPECT_NE(refusal(dir / "sub" / ".." / "kiln.db-wal", protect), "");
}

TEST_F(OutputPath, RefusesTheCatalogThroughASymlinkOrAHardLink) {
  const auto protect = catalog_files(db);
  fs::create_symlink(db, dir / "sym.html");
  fs::create_hard_link(db, dir / "hard.html");
  EXPECT_NE(refusal(dir / "sym.html", protect).find("catalog"), std::string::npos);
  EXPECT_NE(refusal(dir / "hard.html", protect).find("catalog"), std::string::npos);
  // the catalog named through a symlinked path: the sidecar of the resolved name
  fs::create_symlink(db, dir / "alias.db");
  EXPECT_NE(refusal(db.string() + "-wal", catalog_files(dir / "alias.db")), "");
}

TEST_F(OutputPath, RefusesWhatIsNotARegularFile) {
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_NE(refusal(dir / "fifo", {}).find("FIFO"), std::string::npos);
  EXPECT_NE(refusal(dir, {}).find("directory"), std::string::npos);
  if (fs::exists("/dev/null")) EXPECT_NE(refusal("/dev/null", {}).find("character device"), std::string::npos);
}

TEST_F(OutputPath, RefusesAnotherSQLiteDatabaseButNotAPlainFile) {
  EXPECT_NE(refusal(db, {}).find("SQLite database"), std::string::npos);  // not protected: still a database
  write(dir / "report.html", "yesterday's report");
  EXPECT_EQ(refusal(dir / "report.html", catalog_files(db)), "");
  write(dir / "short", "SQLite");  // shorter than the header: not a database
  EXPECT_EQ(refusal(dir / "short", {}), "");
  EXPECT_EQ(refusal(dir / "new.html", catalog_files(db)), "");  // does not exist yet
  EXPECT_NE(refusal("", {}), "");
}

TEST_F(OutputPath, CatalogMustBeARegularFileWhereItExists) {
  EXPECT_NO_THROW(check_catalog_file(db));
  EXPECT_NO_THROW(check_catalog_file(dir / "new.db"));
  ASSERT_EQ(::mkfifo((dir / "fifo.db").c_str(), 0644), 0);
  EXPECT_THROW(check_catalog_file(dir / "fifo.db"), std::invalid_argument);
  EXPECT_THROW(check_catalog_file(dir), std::invalid_argument);
  if (fs::exists("/dev/null")) EXPECT_THROW(check_catalog_file("/dev/null"), std::invalid_argument);
}

}  // namespace
