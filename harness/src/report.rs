//! (stage `report`: being written)
