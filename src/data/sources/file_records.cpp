#include "file_records.h"

#include "lockstep/core/check.h"

namespace lockstep::data_internal {
namespace {

class FileRecordsIterator : public IteratorImpl {
 public:
  FileRecordsIterator(const std::vector<std::string>* files, const RecordReaderFactory* factory)
      : files_(files), factory_(factory) {}
  bool next(Element& out) override {
    while (true) {
      if (!reader_) {
        if (file_ >= files_->size()) return false;
        reader_ = (*factory_)((*files_)[file_]);
      }
      if (reader_->next(out)) return true;
      reader_.reset();
      ++file_;
    }
  }

 private:
  const std::vector<std::string>* files_;
  const RecordReaderFactory* factory_;
  size_t file_ = 0;
  std::unique_ptr<RecordReader> reader_;
};

class FileRecordsNode : public Node {
 public:
  FileRecordsNode(std::vector<std::string> files, RecordReaderFactory factory, ElementSpec spec,
                  std::string name)
      : files_(std::move(files)),
        factory_(std::move(factory)),
        spec_(std::move(spec)),
        name_(std::move(name)) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext&) const override {
    return std::make_unique<FileRecordsIterator>(&files_, &factory_);
  }
  int64_t cardinality() const override { return Dataset::kUnknown; }
  ElementSpec element_spec() const override { return spec_; }
  std::string to_string() const override {
    return name_ + "(" + std::to_string(files_.size()) +
           (files_.size() == 1 ? " file)" : " files)");
  }

  std::vector<std::string> files() const override { return files_; }
  std::shared_ptr<const Node> shard_files(int64_t n, int64_t index) const override {
    return std::make_shared<FileRecordsNode>(shard_list(files_, n, index, name_), factory_, spec_,
                                             name_);
  }

 private:
  std::vector<std::string> files_;
  RecordReaderFactory factory_;
  ElementSpec spec_;
  std::string name_;
};

}  // namespace

std::shared_ptr<const Node> make_file_records(std::vector<std::string> files,
                                              RecordReaderFactory factory, ElementSpec spec,
                                              std::string name) {
  return std::make_shared<FileRecordsNode>(std::move(files), std::move(factory), std::move(spec),
                                           std::move(name));
}

}  // namespace lockstep::data_internal
