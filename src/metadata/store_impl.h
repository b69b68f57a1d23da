// The store back-ends, chosen by OpenMetadataStore.
#pragma once

#include "metadata/store.h"

namespace kvfabric::metadata {

Status OpenEtcdStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out);
Status OpenHttpStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out);

}  // namespace kvfabric::metadata
