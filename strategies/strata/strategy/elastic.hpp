/// \file
/// Elastic training (docs/elastic.md): a job under strata-run --elastic MIN:MAX goes on when a
/// worker is lost or stops answering, and takes in a worker that joins.
///   elastic::Trainer<C>  the loop (elastic/trainer.hpp)
///   elastic::Member      this process in the membership (elastic/member.hpp)
///   elastic::GlobalOrder each epoch cut by global example offset (elastic/global_order.hpp)
#pragma once

#include <strata/strategy/elastic/global_order.hpp>
#include <strata/strategy/elastic/member.hpp>
#include <strata/strategy/elastic/trainer.hpp>
