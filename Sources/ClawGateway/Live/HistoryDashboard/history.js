// The chain's history page: being written.
"use strict";
